#!/usr/bin/env python
"""Store cost per sample as the store grows: format v2 (small manifest + append-only shard log) against format v1
(one manifest listing every sample, rewritten whole at each shard flush), side by side, same synthetic samples.

Tiny synthetic samples (H=8, 3 aux layers, 1..7 tokens, a pool of 64 random tensors reused under distinct ids) so
that the store's own bookkeeping, not tensor bytes, is what is measured. Each shard holds `--per-shard` samples.
For each size N it prints, per sample: the CPU time spent in `flush()` (shard + log + manifest writes), `open()` and
`verify_store()` (full: every sample re-hashed), and the manifest bytes written over the whole run. Flat columns
mean O(1) per sample; v1's flush column grows with N (O(N^2) in total).

v1 is the store module as committed before the change (`git show V1_COMMIT:eagle_nb/store.py`), loaded as a
private module; it is skipped above `--v1-max` samples (at 1M samples and 1000 per shard it would write ~65 GB of
manifest).

  PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venv/bin/python bench/bench_store.py [--sizes 10000,100000,1000000] [--per-shard 1000] [--v1-max 100000]
"""
import argparse, os, shutil, subprocess, sys, tempfile, time, types
from pathlib import Path
import torch

import eagle_nb
from eagle_nb import store as v2

V1_COMMIT = 'ea32fa7'   # last commit with store format v1
TGT = dict(name='bench', architecture='LlamaForCausalLM', num_layers=6, hidden_size=8, vocab_size=50, config_hash='bench')


def load_v1():
    "The format-v1 store module from git history, as `eagle_nb._store_v1` (None when git or the commit is missing)."
    root = Path(eagle_nb.__file__).resolve().parents[1]
    try: src = subprocess.check_output(['git', '-C', str(root), 'show', f'{V1_COMMIT}:eagle_nb/store.py'], text=True, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError): return None
    mod = types.ModuleType('eagle_nb._store_v1'); mod.__package__ = 'eagle_nb'; mod.__file__ = f'{V1_COMMIT}:eagle_nb/store.py'
    sys.modules[mod.__name__] = mod
    exec(compile(src, mod.__file__, 'exec'), mod.__dict__)
    assert mod.VERSION == 1
    return mod


def pool(n=64, H=8):
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        T = 1 + i % 7
        out.append(dict(input_ids=torch.randint(0, 50, (T,), generator=g), loss_mask=torch.ones(T, dtype=torch.uint8),
                        aux=torch.randn(T, 3, H, generator=g), final=torch.randn(T, H, generator=g)))
    return out


def run(mod, N, per_shard, where):
    "Write N samples with `mod`'s store, then open and verify it; seconds per phase and manifest bytes written."
    P = pool()
    per_sample = sum(mod.bytes_per_token(8) * len(x['input_ids']) for x in P) / len(P)
    d = Path(where)/f'{mod.__name__.rsplit(".", 1)[-1]}-{N}'
    s = mod.HiddenStateStore.create(d, target=TGT, layer_ids=[1, 3, 4], engine=dict(name='bench'), shard_bytes=int(per_sample * per_shard))
    flush_s, flush_wall, man_bytes, inner = 0.0, 0.0, 0, s.flush
    def timed_flush():
        nonlocal flush_s, flush_wall, man_bytes
        t, w = time.process_time(), time.perf_counter(); inner()
        flush_s += time.process_time() - t; flush_wall += time.perf_counter() - w
        man_bytes += (d/'manifest.json').stat().st_size
    s.flush = timed_flush                      # add() calls self.flush() when a shard is full
    t = time.perf_counter()
    for i in range(N): s.add(f'x{i}', **P[i % len(P)])
    s.close(complete=True)
    total = time.perf_counter() - t
    t = time.process_time(); r = mod.HiddenStateStore.open(d); n = len(r); open_s = time.process_time() - t
    assert n == N
    t = time.process_time(); rep = mod.verify_store(d); verify_s = time.process_time() - t
    assert rep.ok, str(rep)
    shards = len(r.manifest['shards']); r.close(); shutil.rmtree(d)
    return dict(total=total, flush=flush_s, flush_wall=flush_wall, open=open_s, verify=verify_s, manifest_bytes=man_bytes, shards=shards)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--sizes', default='10000,100000,1000000', help='comma-separated sample counts')
    ap.add_argument('--per-shard', type=int, default=1000, help='samples per shard')
    ap.add_argument('--v1-max', type=int, default=100000, help='largest N to run format v1 at')
    ap.add_argument('--dir', default=None, help='where to write (default: a temp dir)')
    a = ap.parse_args()
    torch.set_num_threads(1)
    v1 = load_v1()
    if v1 is None: print(f'format v1 unavailable (no git or no commit {V1_COMMIT}); v2 only')
    where = Path(a.dir or tempfile.mkdtemp(prefix='bench_store-'))
    print('per sample: CPU microseconds of this process in flush / open / verify (ratios hold on a shared machine); flush wall adds the fsync waits')
    print(f'{"N":>8} {"format":>6} {"shards":>6} {"flush us":>8} {"(wall)":>7} {"open us":>7} {"verify us":>9} {"write s":>8} {"manifest MB":>11}')
    for N in [int(x) for x in a.sizes.split(',')]:
        for name, mod in (('v1', v1), ('v2', v2)):
            if mod is None: continue
            if name == 'v1' and N > a.v1_max: print(f'{N:>8} {name:>6}  skipped (--v1-max {a.v1_max})'); continue
            r = run(mod, N, a.per_shard, where)
            print(f'{N:>8} {name:>6} {r["shards"]:>6} {1e6*r["flush"]/N:>8.1f} {1e6*r["flush_wall"]/N:>7.1f} {1e6*r["open"]/N:>7.2f} {1e6*r["verify"]/N:>9.1f} '
                  f'{r["total"]:>8.1f} {r["manifest_bytes"]/2**20:>11.2f}', flush=True)
    if not a.dir: shutil.rmtree(where, ignore_errors=True)


if __name__ == '__main__':
    main()
