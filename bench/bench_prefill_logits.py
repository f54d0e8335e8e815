#!/usr/bin/env python
"""A speculative prefill with the target's logits for every prompt token against the last token's only (what
`speculative_generate` keeps since it uses only the last; the aux states the drafter needs are captured at every
position either way), the two alternating in one process: median milliseconds of each, and whether the aux states and
the last logits are the same bits.

Usage:
  bench/bench_prefill_logits.py [--target smollm2-135m] [--lengths 120,500,1500] [--reps 5] [--aux 2,15,27] [--json OUT]
"""
import argparse, json, statistics, time
import torch
from eagle_nb.target import load_target
from eagle_nb.specdec import TargetDecoder
from eagle_nb.core import machine_info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--target', default='smollm2-135m')
    ap.add_argument('--lengths', default='120,500,1500', help='prompt tokens, comma-separated')
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--aux', default='2,15,27', help='aux layers captured (the standard drafter: 2,15,27)')
    ap.add_argument('--json', default='')
    a = ap.parse_args()
    t = load_target(a.target)
    dec = TargetDecoder(t, [int(x) for x in a.aux.split(',')])
    g = torch.Generator().manual_seed(0)
    rows = []
    for n in (int(x) for x in a.lengths.split(',')):
        p = torch.randint(100, t.vocab_size - 100, (n,), generator=g).tolist()
        ts, outs = {False: [], True: []}, {}
        for _ in range(a.reps):
            for last in (False, True):
                dec.reset(); t0 = time.perf_counter(); lg, aux = dec.forward(p, last_only=last); ts[last].append(time.perf_counter() - t0)
                outs[last] = (lg[-1], aux)
        r = dict(prompt_tokens=n, all_logits_ms=1e3 * statistics.median(ts[False]), last_logits_ms=1e3 * statistics.median(ts[True]),
                 aux_identical=torch.equal(outs[False][1], outs[True][1]), last_logits_identical=torch.equal(outs[False][0], outs[True][0]))
        rows.append(r)
        print(f"{n:5d} prompt tokens: every position's logits {r['all_logits_ms']:.1f} ms, the last's {r['last_logits_ms']:.1f} ms "
              f"({r['all_logits_ms'] / r['last_logits_ms']:.3f}x); aux states the same bits: {r['aux_identical']}, last logits: {r['last_logits_identical']}")
    if a.json:
        with open(a.json, 'w') as f: json.dump(dict(machine=machine_info(), target=a.target, threads=torch.get_num_threads(), reps=a.reps, rows=rows), f, indent=1)


if __name__ == '__main__':
    main()
