"""Online training (`eagle-nb train --online`): the target runs inside the loop through the extractor's own path.

1. `OnlineStates.get` equals a one-sample-per-batch store's `get` bit for bit (bf16 and fp8), also under concurrent callers;
2. kill -9 in the middle of an online run, resume, and get bit-identical weights to an uninterrupted online run;
3. an online run and an offline run on that store give identical weights and losses (same loss, same data order);
4. bad flags and a changed dataset are refused with one line.
"""
import json, random, shutil, signal, subprocess, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from train_helpers import train_cli, load_weights, metrics, EAGLE_NB, ENV

pytestmark = pytest.mark.usefixtures('one_torch_thread')
KEYS = ('input_ids', 'loss_mask', 'aux', 'final')
ARGS = ['--steps', '16', '--save-every', '3', '--keep-checkpoints', '2', '--ttt-steps', '3', '--lr', '1e-2',
        '--batch-tokens', '256', '--max-len', '256', '--eval-fraction', '0.1', '--draft-vocab-size', '200', '--no-compile']

@pytest.fixture(scope='module')
def smoke(tmp_path_factory, one_torch_thread):
    "A smoke target, a prepared dataset of its conversations, and a store extracted from it one sample per forward."
    from eagle_nb.train import smoke_target
    from eagle_nb.online import make_smoke_dataset
    from eagle_nb.extract import extract, ExtractConfig
    d = tmp_path_factory.mktemp('online')
    tgt = str(smoke_target(d/'target'))
    data = str(make_smoke_dataset(d/'data', tgt, n_samples=32))
    one = dict(max_batch=1, probe_batches=0, progress=False)
    store = extract(data, tgt, d/'store', ExtractConfig(**one), verbose=False)          # the target loaded by name, as online does
    fp8 = extract(data, tgt, d/'store-fp8', ExtractConfig(**one, aux_dtype='fp8'), verbose=False)
    return SimpleNamespace(dir=d, target=tgt, data=data, store=str(store.path), fp8=str(fp8.path))

def _equal(a: dict, b: dict, what: str):
    for k in KEYS:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), f"{what}: {k} differs"

def test_online_get_equals_store_get(smoke):
    "One capture path: every sample's online states are the store's, bit for bit, in the dtypes train() reads."
    from eagle_nb.online import OnlineStates
    from eagle_nb.store import HiddenStateStore
    st, on = HiddenStateStore.open(smoke.store), OnlineStates(smoke.data, smoke.target)
    assert sorted(st.sample_ids) == sorted(on.sample_ids) and on.layer_ids == st.layer_ids
    assert {s['id']: s['length'] for s in on.manifest['samples']} == {s['id']: s['length'] for s in st.manifest['samples']}
    assert on.manifest['target'] == st.manifest['target'] and on.dataset['sha256'] == st.dataset['sha256']
    for i in st.sample_ids:
        for dt in (torch.float32, torch.bfloat16): _equal(on.get(i, dtype=dt), st.get(i, dtype=dt), f'sample {i} ({dt})')
    assert on.forwards == 2 * len(st)
    # the trainer's prefetch thread and its evaluation call get at once: the lock keeps every answer exact
    ids = st.sample_ids * 2
    with ThreadPoolExecutor(4) as pool: got = list(pool.map(on.get, ids))
    for i, g in zip(ids, got): _equal(g, st.get(i), f'sample {i} (4 threads)')
    f8, on8 = HiddenStateStore.open(smoke.fp8), OnlineStates(smoke.data, smoke.target, aux_dtype='fp8')
    for i in f8.sample_ids[:8]: _equal(on8.get(i), f8.get(i), f'sample {i} (fp8)')
    # the tokens train() counts for a draft vocab without a dataset file are the store's
    i = st.sample_ids[0]
    assert all(torch.equal(on.raw(i)[k], st.raw(i)[k]) for k in ('input_ids', 'loss_mask'))

def test_kill9_resume_and_offline_are_bit_identical(smoke, tmp_path):
    "kill -9 mid online run + resume == uninterrupted online run == offline run on the one-sample-per-batch store."
    online = ['--online', '--data', smoke.data, '--target', smoke.target, *ARGS]
    ref, off, cut = tmp_path/'ref', tmp_path/'offline', tmp_path/'cut'
    train_cli([*online, '--out', str(ref)])
    train_cli(['--store', smoke.store, *ARGS, '--out', str(off)])
    a, b = load_weights(ref), load_weights(off)
    assert sorted(a) == sorted(b)
    for k in a: assert torch.equal(a[k], b[k]), f"{k}: online and offline weights differ"
    assert [r['loss'] for r in metrics(ref)] == [r['loss'] for r in metrics(off)]   # train and eval lines alike
    cfg = json.loads((ref/'train_config.json').read_text())
    assert cfg['online'] and cfg['lineage']['online'] and cfg['lineage']['dataset']['path'] == str(Path(smoke.data).resolve())
    lin = json.loads((ref/'config.json').read_text())['lineage']['store']
    assert lin['path'] is None and lin['dataset']['sha256'] == cfg['lineage']['dataset']['sha256']

    kill_at = random.Random().randint(4, 12)  # a random step past the first checkpoint (3): killed at 3 it may die before saving it
    p = subprocess.Popen([EAGLE_NB, 'train', *online, '--out', str(cut)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 240
    while time.time() < deadline and p.poll() is None:
        if (cut/'metrics.jsonl').exists() and any(r.get('step', 0) >= kill_at for r in metrics(cut) if r.get('kind') == 'train'): break
        time.sleep(0.01)
    assert p.poll() is None, f"the run ended before step {kill_at}: {p.stdout.read().decode()[-2000:]}"
    p.send_signal(signal.SIGKILL); p.wait()
    done = max(r['step'] for r in metrics(cut) if r.get('kind') == 'train')
    assert done < 16, f"killed at step {done}"
    r = train_cli([*online, '--out', str(cut)])
    assert 'resumed from' in r.stdout, r.stdout[-1000:]
    c = load_weights(cut)
    for k in a: assert torch.equal(a[k], c[k]), f"{k} differs after kill -9 at step {done} (target {kill_at})"
    steps = [r['step'] for r in metrics(cut) if r['kind'] == 'train']
    assert steps == list(range(1, 17)), steps
    assert [r['loss'] for r in metrics(cut) if r['kind'] == 'train'] == [r['loss'] for r in metrics(ref) if r['kind'] == 'train']

def _cli_error(args) -> str:
    "The one error line of `eagle-nb train ARGS` (exit status 2, no traceback)."
    r = subprocess.run([EAGLE_NB, 'train', *args], env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and 'Traceback' not in r.stderr, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    last = r.stderr.strip().splitlines()[-1]          # above it at most the weights loader's progress bar
    assert last.startswith('eagle-nb train: error: '), r.stderr[-2000:]
    return last

def test_bad_flags(smoke, tmp_path):
    "One line each: what is wrong and the flag that fixes it (flags parsed as `eagle-nb train` parses them)."
    from eagle_nb.core import EagleNbError
    from eagle_nb.train import config_from_args
    out = ['--out', str(tmp_path/'o')]
    def refused(args, what):
        with pytest.raises(EagleNbError, match=what): config_from_args(args)
    refused(['--online', '--target', smoke.target, *out], '--data')
    refused(['--online', '--data', smoke.data, *out], '--target')
    refused(['--online', '--store', smoke.store, '--data', smoke.data, '--target', smoke.target, *out], 'pick one')
    refused(['--store', smoke.store, '--online-layers', '2,3,4', *out], 'add --online')
    refused(['--online', '--data', smoke.data, '--target', smoke.target, '--online-aux-dtype', 'fp4', *out], 'bf16 or fp8')
    refused(['--online', '--data', smoke.data, '--target', smoke.target, '--online-layers', 'two', *out], 'comma-separated')
    # through the command itself: errors found when the data and the target are opened
    assert 'not found' in _cli_error(['--online', '--data', str(tmp_path/'nowhere'), '--target', smoke.target, *out])
    assert 'aux ids must be in' in _cli_error(['--online', '--data', smoke.data, '--target', smoke.target, '--online-layers', '1,2,99', *out])

def test_resume_on_changed_dataset_is_refused(smoke, tmp_path):
    "The resume fingerprint covers the dataset's content, not only its path."
    from eagle_nb.core import EagleNbError
    from eagle_nb.online import make_smoke_dataset
    from eagle_nb.train import TrainConfig, train
    data = tmp_path/'data'
    shutil.copytree(smoke.data, data)
    kw = dict(online=True, data=str(data), target=smoke.target, out=str(tmp_path/'run'), steps=4, save_every=2, ttt_steps=2,
              batch_tokens=256, max_len=256, eval_fraction=0.0, draft_vocab_size=200, compile=False)
    train(TrainConfig(**kw))
    shutil.rmtree(data); make_smoke_dataset(data, smoke.target, n_samples=32, seed=1)   # same path, other conversations
    with pytest.raises(EagleNbError, match='a checkpoint of a different run .the data'):
        train(TrainConfig(**kw))
