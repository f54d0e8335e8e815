"""Scale-out: two `eagle-nb extract` worker processes (one with --shard 1/2, one with torchrun's RANK/WORLD_SIZE)
write OUT/parts/i-of-2 at the same time; the last to finish merges the manifests. The merged store equals a
single-worker run sample by sample (the batch plan is global, so each sample is computed in the same batch)."""
import json, os, subprocess, sys
from pathlib import Path
import torch

from eagle_nb.store import HiddenStateStore, verify_store

ROOT = Path(__file__).resolve().parents[1]
EAGLE = [str(Path(sys.executable).parent/'eagle-nb')]


def write_jsonl(path, n=40, V=300, seed=1):
    g = torch.Generator().manual_seed(seed)
    with open(path, 'w') as f:
        for i in range(n):
            T = int(torch.randint(4, 70, (1,), generator=g))
            f.write(json.dumps(dict(id=f'w{i}', input_ids=torch.randint(3, V, (T,), generator=g).tolist(),
                                    loss_mask=[int(j > T // 3) for j in range(T)])) + '\n')


def cli(args, **env):
    e = {k: v for k, v in os.environ.items() if k not in ('RANK', 'WORLD_SIZE')}
    e.update(EAGLE_NB_PROGRESS='0', OMP_NUM_THREADS='1', **env)
    return subprocess.Popen(EAGLE + ['extract'] + args, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_workers_equal_one(tmp_path):
    data = tmp_path/'data.jsonl'; write_jsonl(data)
    common = ['--data', str(data), '--target', 'tiny-llama', '--token-budget', '256', '--shard-mib', '1', '--probe-batches', '0', '--aux-dtype', 'fp8']
    procs = [cli(common + ['--out', str(tmp_path/'single')]),
             cli(common + ['--out', str(tmp_path/'multi'), '--shard', '0/2']),
             cli(common + ['--out', str(tmp_path/'multi')], RANK='1', WORLD_SIZE='2')]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, o in zip(procs, outs): assert p.returncode == 0, o
    assert 'extract' in outs[0] and 'OK' in outs[0]
    single, multi = HiddenStateStore.open(tmp_path/'single'), HiddenStateStore.open(tmp_path/'multi')
    assert verify_store(tmp_path/'multi').ok
    assert multi.manifest['complete'] and sorted(multi.manifest['merged_from']) == ['parts/0-of-2', 'parts/1-of-2']
    for w in range(2): assert len(HiddenStateStore.open(tmp_path/'multi'/'parts'/f'{w}-of-2')) > 0   # both did work
    assert sorted(single.sample_ids) == sorted(multi.sample_ids) and len(multi) == 40
    sa = {s['id']: s['sha256'] for s in single.manifest['samples']}
    sb = {s['id']: s['sha256'] for s in multi.manifest['samples']}
    assert sa == sb                                               # bit-identical, sample by sample
    x, y = single.get('w5'), multi.get('w5')
    assert torch.equal(x['aux'], y['aux']) and torch.equal(x['final'], y['final'])
    # and the CLI verify agrees
    r = subprocess.run(EAGLE + ['verify', str(tmp_path/'multi')], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and 'OK' in r.stdout
