"`eagle-nb demo --estimate` and profiles with papermill parameter files (`parameters_file`)."
import json
import pytest, yaml
from eagle_nb.core import EagleNbError
from eagle_nb.data import TokenizedDataset
from eagle_nb.pipeline import load_profile, estimate_profile

def _profile(tmp_path, train_file='tiny/03_train.yaml'):
    (tmp_path/'tiny').mkdir(exist_ok=True)
    (tmp_path/'tiny'/'03_train.yaml').write_text('steps: 0\nepochs: 3\nmax_len: 128\neval_fraction: 0.25\nlr: 0.5\n')
    prof = tmp_path/'tiny.yaml'
    prof.write_text(yaml.safe_dump(dict(profile='tiny-est', stages=[
        dict(name='prepare', notebook='00_data.ipynb', parameters=dict(data='sharegpt', target='tiny-llama', max_len=128, limit=12,
                                                                       draft_vocab_size=256, holdout=2, out='{run_dir}/data')),
        dict(name='extract', notebook='01_extract.ipynb', parameters=dict(target='tiny-llama', data='{run_dir}/data', out='{run_dir}/store', limit=0)),
        dict(name='train', notebook='03_train.ipynb', parameters_file=train_file, parameters=dict(store='{run_dir}/store', lr=0.25)),
        dict(name='eval', notebook='04_eval.ipynb', parameters=dict(target='tiny-llama', prompts='humaneval,sharegpt-heldout', limit=3, max_new_tokens=10)),
    ])))
    return prof

def test_parameters_file_merged_inline_wins(tmp_path):
    p = load_profile(str(_profile(tmp_path)))
    tr = p['stages'][2]['parameters']
    assert tr['epochs'] == 3 and tr['max_len'] == 128 and tr['store'] == '{run_dir}/store'
    assert tr['lr'] == 0.25                        # the inline value overrides the file's 0.5

def test_parameters_file_missing(tmp_path):
    with pytest.raises(EagleNbError, match='parameters_file'): load_profile(str(_profile(tmp_path, 'tiny/nope.yaml')))

def test_shipped_full_profile_resolves():
    p = load_profile('full')
    st = {s['name']: s['parameters'] for s in p['stages']}
    assert st['prepare']['limit'] == 0 and st['prepare']['out'] == '{run_dir}/data'
    assert st['train']['store'] == '{run_dir}/store' and st['train']['epochs'] >= 1

@pytest.fixture(scope='module')
def whole(tmp_path_factory):
    """The estimate of a profile preparing 40 conversations (a pool of 40 held back), rates from a made-up finished run: its
    prepare stage runs for real (papermill, ~20 s alone). Shared by test_estimate_profile and the `limit: auto` test, whose
    sizing starts at 40."""
    d = tmp_path_factory.mktemp('est')
    run = d/'whole'
    return d, estimate_profile(str(_auto_profile(d, 40)), run_dir=run, rates_from=_ref(d), log=lambda *a: None), run

@pytest.mark.slow
def test_estimate_profile(whole):
    _, df, run = whole
    assert (run/'00_prepare.done').exists()          # the prepare stage ran for real: the run resumes from it
    ds = TokenizedDataset.open(run/'data')
    assert df.loc['extract', 'tokens'] == sum(ds.lengths) and df.loc['extract', 'seconds'] > 0   # measured by the preflight probe
    train = sum(min(n, 128) for n in ds.lengths) * 0.75 * 3                 # windows x the train share x epochs
    assert df.loc['train', 'tokens'] == int(train) and df.loc['train', 'seconds'] == pytest.approx(train / 100)
    assert df.loc['eval', 'tokens'] == (3 + 2) * 10 and df.loc['eval', 'seconds'] == pytest.approx(50 / 10 + 50 / 20)
    doc = json.loads((run/'estimate.json').read_text())
    assert doc['total_s'] == pytest.approx(float(df['seconds'].sum())) and len(doc['stages']) == 4

@pytest.mark.slow
def test_estimate_probes_rates_without_a_reference_run(tmp_path):
    "No finished run to read rates from: the estimate measures them (scratch store + a few steps of the stage's recipe, one eval prompt)."
    prof = _profile(tmp_path)
    p = yaml.safe_load(prof.read_text())
    p['stages'][2]['parameters']['compile'] = False       # the probe trains with the stage's own settings
    p['stages'].insert(2, dict(name='diagnose', notebook='02_diagnostics.ipynb',
                               parameters=dict(store='{run_dir}/store', store_samples=2, demo_target='tiny-llama', n_samples=2)))
    prof.write_text(yaml.safe_dump(p))
    run, lines = tmp_path/'run', []
    df = estimate_profile(str(prof), run_dir=run, probe=True, log=lines.append)
    assert any('measuring the train and eval rates' in str(l) for l in lines)
    tr, ev, dg = df.loc['train'], df.loc['eval'], df.loc['diagnose']
    assert dg['basis'].startswith('probe: the stage run on the 12-window scratch store') and dg['seconds'] > 0   # no '?' left
    assert tr['basis'].startswith('probe: 12 steps of this recipe') and tr['rate'] > 0
    assert tr['seconds'] == pytest.approx(tr['tokens'] / tr['rate'])
    doc = json.loads((run/'estimate.json').read_text())
    pr, sr = doc['rates']['eval_plain_tokens_per_s'], doc['rates']['eval_spec_tokens_per_s']
    assert ev['basis'].startswith('probe: one prompt') and pr > 0 and sr > 0
    assert ev['seconds'] == pytest.approx(ev['tokens'] / pr + ev['tokens'] / sr)
    assert not (run/'rate-probe').exists() and not (run/'store').exists()   # the scratch store is gone; the stage's own is not made
    assert doc['total_s'] == pytest.approx(float(df['seconds'].sum()))

def test_a_reference_rate_is_used_only_at_its_ttt_depth(tmp_path):
    "The quick run's training rate is measured at its TTT depth; a profile training at another depth probes its own."
    from eagle_nb.pipeline import _measured_rates, _rate_applies
    ref = tmp_path/'ref'; (ref/'drafter').mkdir(parents=True)
    (ref/'run.json').write_text(json.dumps(dict(stages={})))
    (ref/'drafter'/'metrics.jsonl').write_text(''.join(json.dumps(dict(kind='train', step=i, tokens_per_s=100.0)) + '\n' for i in range(20)))
    r = _measured_rates(ref)
    assert r['train_tokens_per_s'] == 100.0 and r['train_ttt_steps'] == 7          # no train_config.json: TrainConfig's 7
    assert _rate_applies({}, r) and _rate_applies({'ttt_steps': 7}, r) and not _rate_applies({'ttt_steps': 3}, r)
    (ref/'drafter'/'train_config.json').write_text(json.dumps(dict(ttt_steps=3)))
    r = _measured_rates(ref)
    assert r['train_ttt_steps'] == 3 and _rate_applies({'ttt_steps': 3}, r) and not _rate_applies({}, r)

def test_a_relative_run_dir_is_made_absolute(tmp_path, monkeypatch):
    "`eagle-nb demo --run-dir _runs/x`: the stage notebooks run in nbs/, so {run_dir} must not stay relative."
    from eagle_nb.pipeline import _run_folder
    monkeypatch.chdir(tmp_path)
    d = _run_folder('standard', 'rel/run')
    assert d.is_absolute() and d == tmp_path/'rel'/'run'

def _ref(tmp_path):
    "A finished run's rates, made up: train 100 tokens/s, eval 10 plain and 20 speculative, diagnose 7 s."
    ref = tmp_path/'ref'; (ref/'drafter').mkdir(parents=True, exist_ok=True); (ref/'eval').mkdir(exist_ok=True)
    (ref/'run.json').write_text(json.dumps(dict(stages={'diagnose': dict(seconds=7.0)})))
    (ref/'drafter'/'metrics.jsonl').write_text(''.join(json.dumps(dict(kind='train', step=i, tokens_per_s=100.0)) + '\n' for i in range(20)))
    (ref/'eval'/'eval.json').write_text(json.dumps(dict(speed=dict(all=dict(plain_tokens_per_s=10.0, spec_tokens_per_s=20.0)))))
    return ref

def _auto_profile(tmp_path, limit, **top):
    p = yaml.safe_load(_profile(tmp_path).read_text())
    p['stages'][0]['parameters'].update(limit=limit, holdout_pool=40)
    p.update(top)
    prof = tmp_path/f'auto-{limit}.yaml'; prof.write_text(yaml.safe_dump(p))
    return prof

def test_an_auto_limit_needs_a_budget_and_a_most():
    "`limit: auto` is sized to `budget_s`, up to `fit_limit.max` conversations: a profile without them is refused when read."
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        with pytest.raises(EagleNbError, match='has none'): load_profile(str(_auto_profile(d, 'auto')))
        with pytest.raises(EagleNbError, match=r'fit_limit: \{max: N\}'): load_profile(str(_auto_profile(d, 'auto', budget_s=60)))
        with pytest.raises(EagleNbError, match='fill=1.5'): load_profile(str(_auto_profile(d, 'auto', budget_s=60, fit_limit=dict(max=40, fill=1.5))))
        assert load_profile(str(_auto_profile(d, 'auto', budget_s=60, fit_limit=dict(max=40))))['stages'][0]['parameters']['limit'] == 'auto'

@pytest.mark.slow
def test_an_auto_limit_is_sized_to_the_budget(whole, tmp_path, monkeypatch):
    """The estimate at `fit_limit.max` conversations is over the budget: the limit shrinks to fit `fill` of it (growing again
    where the scaled limit lands well under), the data is prepared again at that limit (graded on the same held-out
    conversations, from the pool) and the run uses it."""
    import eagle_nb.pipeline as pl
    from eagle_nb.pipeline import _apply_fitted
    ref = _ref(tmp_path)
    whole_dir, whole, _ = whole
    budget = whole.attrs['total_s'] * 0.6 / 0.9            # 90% of it is 60% of what 40 conversations take
    prof, run, lines = _auto_profile(tmp_path, 'auto', budget_s=budget, fit_limit=dict(max=40, step=4)), tmp_path/'run', []
    df = estimate_profile(str(prof), run_dir=run, rates_from=ref, log=lines.append)
    fit = json.loads((run/'fit_limit.json').read_text())
    n = fit['limit']
    assert n < 40 and n % 4 == 0 and fit['tried'][0]['limit'] == 40
    assert fit['tried'][0]['total_s'] == pytest.approx(whole.attrs['total_s'], rel=0.25)   # the same data at 40 (its prepare re-timed)
    assert df.attrs['total_s'] == fit['total_s'] <= fit['target_s'] == pytest.approx(0.9 * budget)
    over = [t['limit'] for t in fit['tried'] if t['total_s'] > fit['target_s']]   # it fills the target, or a step more missed it
    assert fit['total_s'] >= (1 - 0.03) * fit['target_s'] or min(over) <= n + 4 or len(fit['tried']) >= 4, fit['tried']
    assert fit['tried'][-1]['limit'] == n
    assert any(f'limit auto: {n:,} conversations' in str(l) for l in lines)
    ds, ds40 = TokenizedDataset.open(run/'data'), TokenizedDataset.open(whole_dir/'whole'/'data')
    assert ds.manifest['source']['limit'] == n and len(ds) < len(ds40)
    assert ds.manifest['heldout']['ids'] == ds40.manifest['heldout']['ids']             # the pool: the same held-out ones
    assert json.loads((run/'00_prepare.metrics.json').read_text())['parameters']['limit'] == n
    assert json.loads((run/'estimate.json').read_text())['fit_limit']['limit'] == n
    cfg = load_profile(str(prof))
    assert _apply_fitted(cfg, run) == n and cfg['stages'][0]['parameters']['limit'] == n   # what the run (and a resume) uses
    assert _apply_fitted(load_profile(str(prof)), whole_dir/'whole') is None
    # a sizing cut short (no fit_limit.json, data prepared at some other limit) sizes again from `max`, never from that data:
    # its first try is at `max`, on the same data as the first sizing's first try (that try is all this needs: the search
    # after it is the one checked above, and each try prepares the data again, ~30 s here)
    (run/'fit_limit.json').unlink()
    monkeypatch.setattr(pl, '_next_limit', lambda *a, **k: None)
    estimate_profile(str(prof), run_dir=run, rates_from=ref, log=lambda *a: None)
    again = json.loads((run/'fit_limit.json').read_text())
    assert [t['limit'] for t in again['tried']] == [40] and again['tried'][0]['tokens'] == fit['tried'][0]['tokens']
    assert TokenizedDataset.open(run/'data').manifest['source']['limit'] == again['limit'] == 40 != n


def test_an_auto_limit_is_not_sized_for_other_stages(tmp_path, monkeypatch):
    """`eagle-nb demo --stages eval` on a `limit: auto` profile runs the eval only: sizing the limit prepares data, which
    would overwrite the run's `data` (found when an eval-only rerun re-prepared a linked run's data at `fit_limit.max`)."""
    import eagle_nb.pipeline as pl
    ran = []
    monkeypatch.setattr(pl, 'project_dir', lambda: tmp_path)
    monkeypatch.setattr(pl, 'estimate_profile', lambda *a, **k: ran.append('estimate') or pytest.fail('sized the limit'))
    monkeypatch.setattr(pl, 'run_stage', lambda st, i, *a, **k: ran.append(st['name']) or dict(stage=st['name'], seconds=0.0, status='ok'))
    monkeypatch.setattr(pl, 'write_index', lambda *a, **k: None)
    prof = _auto_profile(tmp_path, 'auto', budget_s=60, fit_limit=dict(max=40))
    pl.run_pipeline(str(prof), run_dir=tmp_path/'run', stages=['eval'])
    assert ran == ['eval']
    monkeypatch.setattr(pl, 'estimate_profile', lambda *a, **k: ran.append('estimate') or pytest.fail('stop here'))
    with pytest.raises(pytest.fail.Exception, match='stop here'): pl.run_pipeline(str(prof), run_dir=tmp_path/'run2', stages=['prepare'])
    assert ran[-1] == 'estimate'


def test_a_cell_limit_turns_a_stalled_stage_into_a_failure(tmp_path):
    "`run_stage(cell_timeout=)`: a cell past the limit fails the stage (named, nothing marked done) instead of waiting forever."
    import nbformat
    from eagle_nb.pipeline import run_stage
    nbs = tmp_path/'nbs'; nbs.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('seconds: float = 0.0  # how long to sleep', metadata={'tags': ['parameters']}),
                                         nbformat.v4.new_code_cell('import time; time.sleep(seconds)')])
    nb.metadata['kernelspec'] = dict(name='python3', display_name='python3', language='python')
    nbformat.write(nb, nbs/'sleep.ipynb')
    stage, run = dict(name='sleep', notebook='sleep.ipynb', parameters=dict(seconds=60.0)), tmp_path/'run'; run.mkdir()
    with pytest.raises(EagleNbError, match='stage sleep failed.*(Timeout|timed out)'):
        run_stage(stage, 0, run, {}, nbs, log=lambda *a: None, cell_timeout=3)
    assert not (run/'00_sleep.done').exists() and json.loads((run/'00_sleep.metrics.json').read_text())['status'] == 'failed'
    assert run_stage(dict(stage, parameters=dict(seconds=0.1)), 0, run, {}, nbs, log=lambda *a: None, cell_timeout=30)['status'] == 'ok'

def test_a_failed_probe_try_is_said_and_tried_again(tmp_path, monkeypatch):
    "The diagnose probe's cell limit and second try (`_probe_stage`): each failed try is logged with its reason, the basis says it."
    import eagle_nb.pipeline as P
    calls = []
    def fake_run(stage, i, run_dir, ctx, nbs, log=None, cell_timeout=None):
        calls.append(cell_timeout)
        if len(calls) == 1: raise EagleNbError("stage diagnose failed: a cell ran past 600 s")
        return dict(seconds=3.5)
    monkeypatch.setattr(P, 'run_stage', fake_run)
    lines = []
    m, basis = P._probe_stage(dict(name='diagnose'), {}, tmp_path, tmp_path, log=lines.append)
    assert m == dict(seconds=3.5) and calls == [P.PROBE_CELL_S] * 2
    assert lines == ["the diagnose probe failed on try 1 of 2: stage diagnose failed: a cell ran past 600 s"]
    assert basis.startswith('probe: the stage run on the scratch store') and 'after a failed try: stage diagnose failed' in basis
    monkeypatch.setattr(P, 'run_stage', lambda *a, **k: (_ for _ in ()).throw(EagleNbError('no kernel')))
    lines.clear()
    m, basis = P._probe_stage(dict(name='diagnose'), {}, tmp_path, tmp_path, log=lines.append)
    assert m is None and basis == 'not measured: the probe run failed (no kernel)' and len(lines) == 2
