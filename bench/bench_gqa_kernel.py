#!/usr/bin/env python
"""One decode step's attention kernel alone, as transformers' `sdpa` calls it for GQA and as eagle_nb packs it: one query
token, 9 query heads on 3 KV heads, head dim 64 (SmolLM2's shape), bf16, no mask; `enable_gqa=True` (transformers' choice
on a CPU), `repeat_kv` (its choice elsewhere under a mask), and the query heads packed as rows of their KV heads
(`specdec.packed_gqa_sdpa`). Median microseconds of each, and the largest difference from the repeat_kv output.

Usage:
  bench/bench_gqa_kernel.py [--keys 200,600,1200,2500] [--reps 200] [--heads 9] [--kv-heads 3] [--json OUT]
"""
import argparse, json, statistics, time
import torch
from eagle_nb.core import machine_info

F = torch.nn.functional


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--keys', default='200,600,1200,2500', help='cached tokens, comma-separated')
    ap.add_argument('--reps', type=int, default=200)
    ap.add_argument('--heads', type=int, default=9)
    ap.add_argument('--kv-heads', type=int, default=3)
    ap.add_argument('--json', default='')
    a = ap.parse_args()
    h, kvh, d, rep = a.heads, a.kv_heads, 64, a.heads // a.kv_heads
    g, rows = torch.Generator().manual_seed(0), []
    for n in (int(x) for x in a.keys.split(',')):
        q = torch.randn(1, h, 1, d, generator=g).to(torch.bfloat16)
        k, v = (torch.randn(1, kvh, n, d, generator=g).to(torch.bfloat16) for _ in range(2))
        ways = {'repeat_kv': lambda: F.scaled_dot_product_attention(q, *(x[:, :, None].expand(1, kvh, rep, n, d).reshape(1, h, n, d) for x in (k, v)), scale=d ** -0.5),
                'enable_gqa': lambda: F.scaled_dot_product_attention(q, k, v, scale=d ** -0.5, enable_gqa=True),
                'packed': lambda: F.scaled_dot_product_attention(q.view(1, kvh, rep, d), k, v, scale=d ** -0.5).view(1, h, 1, d)}
        ts, outs = {w: [] for w in ways}, {}
        for _ in range(a.reps):
            for w, f in ways.items():
                t0 = time.perf_counter(); outs[w] = f(); ts[w].append(time.perf_counter() - t0)
        r = dict(keys=n, **{f'{w}_us': 1e6 * statistics.median(t) for w, t in ts.items()},
                 **{f'{w}_max_diff': float((outs[w].float() - outs['repeat_kv'].float()).abs().max()) for w in ways})
        rows.append(r)
        print(f"{n:5d} keys: enable_gqa {r['enable_gqa_us']:.0f} us, repeat_kv {r['repeat_kv_us']:.0f} us, packed {r['packed_us']:.0f} us "
              f"(enable_gqa / packed {r['enable_gqa_us'] / r['packed_us']:.1f}x); largest difference from repeat_kv: "
              f"enable_gqa {r['enable_gqa_max_diff']}, packed {r['packed_max_diff']}")
    if a.json:
        with open(a.json, 'w') as f: json.dump(dict(machine=machine_info(), threads=torch.get_num_threads(), reps=a.reps, rows=rows), f, indent=1)


if __name__ == '__main__':
    main()
