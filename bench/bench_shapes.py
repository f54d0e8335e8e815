#!/usr/bin/env python
"""What new shapes cost on this CPU: bf16 GEMMs (fwd+bwd) and flash attention (fwd+bwd) timed over row counts / lengths
that are all new, the same ones again, one fixed size, and the same rounded up to multiples of `drafter.ROW_BUCKET`.

oneDNN (GEMMs) and the CPU flash-attention kernel build a kernel per new shape; a training run over windows of every
length sees new shapes on nearly every step, a step timed alone never does. Side by side in one run:

    python bench/bench_shapes.py [--threads 2] [--n 60]
"""
import argparse, json, random, time
import torch
import torch.nn.functional as F
from eagle_nb.drafter import ROW_BUCKET

p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
p.add_argument('--threads', type=int, default=2)
p.add_argument('--n', type=int, default=60, help='operations per case')
p.add_argument('--json', action='store_true')
a = p.parse_args()
torch.set_num_threads(a.threads); torch.manual_seed(0)
W = torch.randn(8192, 576, dtype=torch.bfloat16, requires_grad=True)    # SmolLM2 hidden x an 8K draft vocab lm_head

def gemm(ms):
    for m in ms:
        x = torch.randn(m, 576, dtype=torch.bfloat16, requires_grad=True)
        (x @ W.t()).sum().backward()

def attention(ts):
    for t in ts:
        q = torch.randn(1, 9, t, 64, dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn(1, 3, t, 64, dtype=torch.bfloat16) for _ in range(2))
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()

def timed(fn, sizes):
    t0, c0 = time.perf_counter(), time.process_time()
    fn(sizes)
    w = time.perf_counter() - t0
    return dict(seconds=round(w, 3), cpu_per_wall=round((time.process_time() - c0) / w, 2), rows=sum(sizes))

rng = random.Random(0)
out = {}
for name, fn, lo, hi in [('gemm', gemm, 200, 512), ('attention', attention, 100, 512)]:
    fn([300] * 3)                                                                   # warm-up
    new = [rng.randint(lo, hi) for _ in range(a.n)]
    cases = {'all new': new, 'the same again': list(new), 'one fixed size': [sum(new) // len(new)] * a.n,
             f'new, rounded to x{ROW_BUCKET}': [-(-m // ROW_BUCKET) * ROW_BUCKET for m in (rng.randint(lo, hi) for _ in range(a.n))]}
    out[name] = {k: timed(fn, v) for k, v in cases.items()}
    base = out[name]['the same again']['seconds']
    print(f"{name}: {a.n} ops of {lo}-{hi} rows, {a.threads} threads")
    for k, r in out[name].items():
        print(f"  {k:24} {r['seconds']:6.3f} s  ({r['seconds'] / base:4.2f}x the same shapes again; CPU/wall {r['cpu_per_wall']})")
if a.json: print(json.dumps(out))
