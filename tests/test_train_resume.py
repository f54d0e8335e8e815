"kill -9 in the middle of `eagle-nb train`, resume, and get bit-identical weights to an uninterrupted run."
import os, random, signal, subprocess, time
from pathlib import Path
import torch
from train_helpers import smoke_store, train_cli, load_weights, metrics, EAGLE_NB, ENV

ARGS = ['--steps', '24', '--save-every', '3', '--keep-checkpoints', '2', '--ttt-steps', '3', '--lr', '1e-2',
        '--batch-tokens', '256', '--max-len', '256', '--eval-fraction', '0.1', '--draft-vocab-size', '200', '--no-compile']

def _split(path):
    import json, struct
    b = path.read_bytes(); n = struct.unpack('<Q', b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]

def test_kill9_then_resume_is_bit_identical(tmp_path):
    store = smoke_store()
    args = ['--store', store, *ARGS]
    ref = tmp_path/'ref'
    train_cli([*args, '--out', str(ref)])
    assert not (ref/'profile.txt').exists()             # no --profile-steps, no profile (test_train_loss profiles)
    kill_at = random.Random().randint(4, 20)           # a random step (printed on failure)
    cut = tmp_path/'cut'
    p = subprocess.Popen([EAGLE_NB, 'train', *args, '--out', str(cut)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = cut/'metrics.jsonl'
    deadline = time.time() + 240
    while time.time() < deadline and p.poll() is None:
        if log.exists() and any(r.get('step', 0) >= kill_at for r in metrics(cut) if r.get('kind') == 'train'): break
        time.sleep(0.01)
    assert p.poll() is None, f"the run ended before step {kill_at}: {p.stdout.read().decode()[-2000:]}"
    p.send_signal(signal.SIGKILL); p.wait()
    assert p.returncode == -signal.SIGKILL
    done = max(r['step'] for r in metrics(cut) if r.get('kind') == 'train')
    assert done < 24, f"killed at step {done}"
    r = train_cli([*args, '--out', str(cut)])                 # resumes from its latest checkpoint
    a, b = load_weights(ref), load_weights(cut)
    assert sorted(a) == sorted(b)
    for k in a: assert torch.equal(a[k], b[k]), f"{k} differs after kill -9 at step {done} (target {kill_at})"
    # byte for byte: the same header (safetensors orders its __metadata__ map at random per process) and data section
    ha, da = _split(ref/'model.safetensors'); hb, db = _split(cut/'model.safetensors')
    assert ha == hb and da == db
    # the log reads like one run: every step once, and the same losses as the reference
    steps = [r['step'] for r in metrics(cut) if r['kind'] == 'train']
    assert steps == list(range(1, 25)), steps
    test_loss = [r['loss'] for r in metrics(cut) if r['kind'] == 'train']
    assert test_loss == [r['loss'] for r in metrics(ref) if r['kind'] == 'train']
    assert len(list((cut/'checkpoints').iterdir())) == 2     # keep_checkpoints, no temp debris

def test_nan_stops_with_step_sample_and_checkpoint(tmp_path):
    "A non-finite loss raises EagleNbError naming the step, the batch's sample ids and the last good checkpoint."
    from eagle_nb.store import HiddenStateStore
    from eagle_nb.train import TrainConfig, train, plan_batches
    from eagle_nb.core import EagleNbError
    torch.set_num_threads(1)
    src = HiddenStateStore.open(smoke_store())
    lengths = {e['id']: min(e['length'], 256) for e in src.manifest['samples'] if e['length'] >= 3}
    one_per_step = TrainConfig.__dataclass_fields__['batch_samples'].default   # the trainer's default samples-per-batch cap
    bad_id = plan_batches(lengths, 256, seed=0, epoch=0, max_samples=one_per_step)[3][0]   # in the 4th batch: step 4
    dst = HiddenStateStore.create(tmp_path/'poisoned', target=src.manifest['target'], layer_ids=src.layer_ids, engine=dict(name='test'))
    for i in src.sample_ids:
        s = src.get(i)
        aux = s['aux'].clone()
        if i == bad_id: aux[3] = float('nan')
        dst.add(i, s['input_ids'], s['loss_mask'], aux, s['final'])
    dst.close(complete=True)
    c = TrainConfig(store=str(tmp_path/'poisoned'), out=str(tmp_path/'out'), steps=40, save_every=1, ttt_steps=2, lr=1e-2,
                    batch_tokens=256, max_len=256, eval_fraction=0.0, compile=False)
    try: train(c); raise AssertionError('no error on a NaN loss')
    except EagleNbError as e: msg = str(e)
    assert 'step ' in msg and bad_id in msg and 'last good checkpoint' in msg, msg
    assert msg.startswith('step 4:') and 'checkpoints/step-00000003' in msg, msg   # the step before is the last good one
    ok = load_weights(tmp_path/'out')                                            # its weights are saved and finite
    assert all(torch.isfinite(v.float()).all() for v in ok.values())
