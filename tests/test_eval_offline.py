"""`eagle-nb eval` offline: drafter checkpoints in every format `load_drafter` reads (eagle_nb, SGLang and
speculators exports) run through real speculative decoding and stay lossless; the held-out ShareGPT split comes
from a prepared dataset's manifest and a leaked id is refused; bad input gives one-line errors."""
import contextlib, io, json
import pytest, torch
from eagle_nb.core import EagleNbError
from eagle_nb.eval import (eval_main, EvalConfig, run_eval, eval_document, load_eval_prompts, heldout_prompts,
                           random_init_drafter, checkpoint_dataset)
from eagle_nb.target import tiny_target, load_target


@pytest.fixture(autouse=True, scope='module')
def one_thread():
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def run(argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf): rc = eval_main(argv)
    return rc, buf.getvalue()


@pytest.fixture(scope='module')
def checkpoints(tmp_path_factory):
    "A random-init drafter for tiny-llama saved as eagle_nb checkpoint, SGLang export and speculators export."
    from eagle_nb.drafter import save_drafter, export_sglang, export_speculators
    d = tmp_path_factory.mktemp('ckpt')
    t = load_target('tiny-llama')
    model = random_init_drafter(t, draft_vocab_size=200, seed=1)
    save_drafter(model, d/'ckpt')
    export_sglang(model, d/'sglang'); export_speculators(model, d/'speculators')
    return {k: d/k for k in ('ckpt', 'sglang', 'speculators')}


@pytest.mark.parametrize('fmt', ['ckpt', 'sglang', 'speculators'])
def test_eval_checkpoint_formats(checkpoints, fmt, tmp_path):
    rc, out = run(['--target', 'tiny-llama', '--drafter', str(checkpoints[fmt]), '--limit', '2', '--max-new-tokens', '10',
                   '--num-steps', '3', '--json', '--out', str(tmp_path/'e.json')])
    assert rc == 0
    doc = json.loads(out)
    assert doc['drafter']['kind'] == 'eagle3' and doc['drafter']['aux_layer_ids'] == [2, 4, 5]
    assert doc['speed']['all']['lossless'] is True and len(doc['prompts']) == 2
    m = doc['metrics']['all']
    assert m['verify_count'] > 0 and len(m['alpha']) == 3 and m['proposed_drafts'] == 3 * m['verify_count']


def test_eval_tree_mode_and_table(checkpoints, tmp_path):
    rc, out = run(['--target', 'tiny-llama', '--drafter', str(checkpoints['ckpt']), '--limit', '2', '--max-new-tokens', '10',
                   '--num-steps', '3', '--topk', '3', '--num-draft-tokens', '8', '--out', str(tmp_path/'e.json')])
    assert rc == 0 and 'tau' in out and 'report:' in out
    doc = json.loads((tmp_path/'e.json').read_text())
    assert doc['spec']['topk'] == 3 and doc['metrics']['all']['proposed_drafts'] == 7 * doc['metrics']['all']['verify_count']


def test_heldout_split(tmp_path):
    from eagle_nb.data import prepare_dataset
    t = tiny_target('llama')
    conv = [json.dumps({'id': f'c{i}', 'conversations': [{'from': 'human', 'value': f'question {i}?'}, {'from': 'gpt', 'value': f'answer {i}.'}]})
            for i in range(12)]
    (tmp_path/'d.jsonl').write_text('\n'.join(conv) + '\n')
    prepare_dataset(str(tmp_path/'d.jsonl'), t, tmp_path/'ds', max_len=128, holdout=4, draft_vocab_size=100)
    ps = load_eval_prompts('sharegpt-heldout', t.tokenizer, dataset=tmp_path/'ds')
    manifest = json.loads((tmp_path/'ds'/'manifest.json').read_text())
    assert sorted(p.id for p in ps) == sorted(manifest['heldout']['ids']) and len(ps) == 4
    assert not set(manifest['heldout']['ids']) & {s['id'] for s in manifest['samples']}
    assert all(p.messages[-1]['role'] == 'user' and p.set == 'sharegpt-heldout' for p in ps)
    text = t.tokenizer.decode(ps[0].input_ids)
    assert text.endswith('<|start_header_id|>assistant<|end_header_id|>\n\n') and 'answer' not in text
    # a manifest whose held-out id is also a training sample is refused
    manifest['heldout']['ids'][0] = manifest['samples'][0]['id']
    (tmp_path/'ds'/'manifest.json').write_text(json.dumps(manifest))
    with pytest.raises(EagleNbError, match='also training samples'):
        heldout_prompts(tmp_path/'ds', t.tokenizer)
    # a checkpoint leads to its dataset: config.json lineage.store (named fields) -> the store's dataset
    from eagle_nb.drafter import save_drafter
    save_drafter(random_init_drafter(t, 50), tmp_path/'ck', lineage={'path': str(tmp_path/'store'), 'dataset': {'path': str(tmp_path/'ds')}})
    assert checkpoint_dataset(tmp_path/'ck') == str(tmp_path/'ds') and checkpoint_dataset(tmp_path) is None
    prepare_dataset(str(tmp_path/'d.jsonl'), t, tmp_path/'ds0', max_len=128, holdout=0, draft_vocab_size=100)
    with pytest.raises(EagleNbError, match='--holdout'):
        heldout_prompts(tmp_path/'ds0', t.tokenizer)


def test_heldout_from_a_dataset_prepared_before_relatives_were_left_out_warns(tmp_path):
    "A manifest without heldout.relatives_left_out (prepared before 2026-12-05) still serves its prompts, with a warning that counts the trained parts."
    import warnings
    from eagle_nb.data import prepare_dataset
    t = tiny_target()
    conv = [json.dumps({'id': f'x{i // 3}_{i % 3}', 'conversations': [{'from': 'human', 'value': f'question {i}?'}, {'from': 'gpt', 'value': f'answer {i}.'}]})
            for i in range(12)]   # four chats of three parts each
    (tmp_path/'d.jsonl').write_text('\n'.join(conv) + '\n')
    prepare_dataset(str(tmp_path/'d.jsonl'), t, tmp_path/'ds', max_len=128, holdout=2, draft_vocab_size=100)
    mpath = tmp_path/'ds'/'manifest.json'
    manifest = json.loads(mpath.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter('error')            # a dataset prepared now: no warning
        assert len(heldout_prompts(tmp_path/'ds', t.tokenizer)) == 2
    held = manifest['heldout']['ids']
    # a user's own file: ids ending in _N are not parts, so prepare trained on x*_N beside a held-out one; as ShareGPT they are
    trained = {s['id'].split('#')[0] for s in manifest['samples']}
    want = sum(1 for c in trained if c.split('_')[0] in {h.split('_')[0] for h in held})
    assert want >= 2
    del manifest['heldout']['relatives_left_out']; manifest['source']['spec'] = 'sharegpt'
    mpath.write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match=f'prepared before held-out relatives.*; {want} trained conversations are other parts'):
        assert len(heldout_prompts(tmp_path/'ds', t.tokenizer)) == 2
    manifest['source']['spec'] = str(tmp_path/'d.jsonl'); mpath.write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match=r'prepared before held-out relatives were left out of training; conversations opening'):
        heldout_prompts(tmp_path/'ds', t.tokenizer)


def test_errors():
    for argv, msg in [(['--drafter', 'ngram', '--target', 'tiny-llama', '--prompts', 'mmlu'], "use 'humaneval'"),
                      (['--drafter', 'ngram', '--target', 'tiny-llama', '--prompts', 'sharegpt-heldout'], '--dataset DIR'),
                      (['--drafter', 'ngram', '--target', 'tiny-llama', '--num-steps', '0'], 'num_steps=0'),
                      (['--drafter', 'ngram', '--target', 'tiny-llama', '--topk', '2', '--num-steps', '2', '--num-draft-tokens', '9'], 'between 2 and 7')]:
        with pytest.raises(EagleNbError, match=msg): run(argv)


def test_sampling_eval_runs(tmp_path):
    rc, out = run(['--target', 'tiny-llama', '--drafter', 'ngram', '--limit', '1', '--max-new-tokens', '8',
                   '--temperature', '0.7', '--json', '--out', str(tmp_path/'e.json')])
    doc = json.loads(out)
    assert rc == 0 and doc['speed']['all']['lossless'] is None and doc['prompts'][0]['lossless'] is None


def test_time_limit_takes_sets_in_turn_and_says_what_ran(tmp_path):
    "--max-seconds: no prompt starts past the limit (at least one runs), sets are interleaved so a cut run covers each, the report says so."
    from eagle_nb.eval import EvalPrompt, evaluate, interleave_sets, load_proposer_factory, humaneval_prompts
    from eagle_nb.specdec import SpecConfig
    t = tiny_target('llama')
    he = humaneval_prompts(t.tokenizer, limit=3)
    ps = he + [EvalPrompt(f'o{i}', 'other', p.input_ids[:20]) for i, p in enumerate(he[:2])]
    assert [p.id for p in interleave_sets(ps)] == [he[0].id, 'o0', he[1].id, 'o1', he[2].id]
    f, _ = load_proposer_factory('ngram', t)
    spec = SpecConfig(num_steps=2, max_new_tokens=6)
    cut = evaluate(t, f, ps, spec, warmup=False, max_seconds=1e-6)      # spent after one prompt: no second one starts
    tl = cut.info['time_limit']
    assert len(cut.rows) == 1 and tl['prompts_run'] == 1 and tl['prompts_planned'] == 5 and tl['complete'] is False
    whole = evaluate(t, f, ps, spec, warmup=False, max_seconds=3600)
    assert [r['id'] for r in whole.rows] == [p.id for p in interleave_sets(ps)] and whole.info['time_limit']['complete'] is True
    plain = evaluate(t, f, ps, spec, warmup=False)                       # no limit: the given order, no time_limit entry
    assert [r['id'] for r in plain.rows] == [p.id for p in ps] and 'time_limit' not in plain.info
    rc, out = run(['--target', 'tiny-llama', '--drafter', 'ngram', '--limit', '3', '--max-new-tokens', '6',
                   '--max-seconds', '0.000001', '--out', str(tmp_path/'e.json')])
    doc = json.loads((tmp_path/'e.json').read_text())
    assert rc == 0 and 'ran 1 of 3 prompts' in out and doc['time_limit']['prompts_run'] == 1 and len(doc['prompts']) == 1


def test_evaluate_runs_in_inference_mode():
    "No autograd bookkeeping while decoding: the drafters are made, and run, under torch.inference_mode."
    from eagle_nb.eval import evaluate, load_proposer_factory, humaneval_prompts
    from eagle_nb.specdec import SpecConfig
    t = tiny_target('llama')
    f, _ = load_proposer_factory('ngram', t)
    seen = []
    def factory(p, ref):
        seen.append(torch.is_inference_mode_enabled()); return f(p, ref)
    evaluate(t, factory, humaneval_prompts(t.tokenizer, limit=1), SpecConfig(num_steps=2, max_new_tokens=4), warmup=False)
    assert seen and all(seen)


def test_profile_writes_plain_and_speculative_tables_from_untimed_runs(tmp_path):
    "--profile FILE: torch.profiler tables of one extra run of the first prompt, plain then speculative; the timed rows are the same prompts."
    prof = tmp_path/'decode_profile.txt'
    rc, out = run(['--target', 'tiny-llama', '--drafter', 'ngram', '--limit', '2', '--max-new-tokens', '8',
                   '--profile', str(prof), '--json', '--out', str(tmp_path/'e.json')])
    doc = json.loads(out)
    assert rc == 0 and doc['profile'] == str(prof) and len(doc['prompts']) == 2
    text = prof.read_text()
    assert text.count('# eagle-nb eval --profile:') == 2 and 'plain greedy decoding of prompt' in text
    assert 'speculative decoding of prompt' in text and 'aten::' in text and text.count('## by self CPU time') == 2


def test_time_limit_judges_a_prompt_by_the_prompts_alone():
    "A slow warm-up (or profile run) spends the budget but does not make each prompt look slow: more prompts follow the first."
    import time
    from eagle_nb.eval import evaluate, load_proposer_factory, humaneval_prompts
    from eagle_nb.specdec import SpecConfig
    t = tiny_target('llama')
    f, _ = load_proposer_factory('ngram', t)
    calls = []
    def factory(p, ref):                       # call 1: the probe; call 2: the warm-up run, which takes 3 s here
        calls.append(p.id)
        if len(calls) == 2: time.sleep(3.0)
        return f(p, ref)
    res = evaluate(t, factory, humaneval_prompts(t.tokenizer, limit=4), SpecConfig(num_steps=2, max_new_tokens=4), max_seconds=5.5)
    # judged by time spent / prompts run, the first prompt would look over 3 s long and no second one would start in the
    # 2.5 s left (budget < 2 x the warm-up keeps that true however slow the machine); judged by the prompts alone, a second
    # prompt starts whenever a tiny-model prompt takes under ~2.5 s minus the probe (it failed once with 3 s and 1.5 s on a
    # 2-core machine loaded by three test lanes)
    assert res.info['time_limit']['prompts_run'] >= 2, res.info['time_limit']

def test_vllm_engine_refuses_what_only_eagle_nbs_decoder_does(tmp_path):
    "--int8 and --min-draft-prob change eagle_nb's own decoder; served by vLLM they would be silently ignored, so they are refused."
    from eagle_nb.cli import eval_main
    for flags in (['--int8'], ['--min-draft-prob', '0.1']):
        with pytest.raises(EagleNbError, match='own decoder'):
            eval_main(['--engine', 'vllm', '--drafter', str(tmp_path), '--out', str(tmp_path/'v.json'), *flags])

def test_int8_drafting_is_for_cpus_and_the_report_says_so_elsewhere():
    from eagle_nb.eval import load_proposer_factory
    from eagle_nb.specdec import Int8Linear
    t = tiny_target('llama')
    f, d = load_proposer_factory('random-init', t, int8=True)
    assert d['int8'] is True and any(isinstance(m, Int8Linear) for m in f(None, []).model.modules())
    t.model.to('meta')                                   # a target on another device (no CUDA here): the drafter stays bf16
    f, d = load_proposer_factory('random-init', t, int8=True)
    assert d['int8'] is False and 'CPUs' in d['int8_note'] and not any(isinstance(m, Int8Linear) for m in f(None, []).model.modules())
