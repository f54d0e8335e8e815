#!/usr/bin/env python
"""What a verify forward costs, in plain decoding steps, with transformers' `sdpa` attention, with eagle_nb's packed GQA
attention (`specdec.packed_gqa_attention`, the default) and with exact rows (`SpecConfig(exact=True)`: each row attended
over its own prefix, as a one-token step does), measured side by side in one run.

For each context length, one process and one KV cache: the target's one-token decode step (plain decoding) under
transformers' `sdpa` and under the packed attention (the default, and the baseline every cost is divided by), and a
`--tokens`-token chain verify (the root and its drafts, with aux capture, as `speculative_generate` runs it) in each of
the three ways, interleaved round by round so that machine noise falls on all; the median of `--reps` of each.
Every verify's logits and aux states under sdpa and packed are compared bit for bit, and so are the two one-token
steps; the exact rows' first row is compared with the (packed) one-token step's.

Usage:
  bench/bench_verify_attention.py [--target smollm2-135m] [--contexts 300,1000,2500] [--tokens 4] [--reps 60] [--threads 0] [--json OUT]
"""
import argparse, json, statistics, sys, time
import torch

from eagle_nb.target import load_target
from eagle_nb.specdec import TargetDecoder, crop_cache, PACKED_SDPA
from eagle_nb.core import machine_info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--target', default='smollm2-135m')
    ap.add_argument('--contexts', default='300,1000,2500', help='cached tokens before each step, comma-separated')
    ap.add_argument('--tokens', type=int, default=4, help='tokens per verify (root + drafts: 4 for a 3-step chain)')
    ap.add_argument('--reps', type=int, default=60)
    ap.add_argument('--threads', type=int, default=0, help='torch threads (0: torch default)')
    ap.add_argument('--aux', default='2,15,27', help='aux layers captured in the verify (the standard drafter: 2,15,27)')
    ap.add_argument('--json', default='', help='write the results here too')
    a = ap.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    t = load_target(a.target)
    dec = TargetDecoder(t, [int(x) for x in a.aux.split(',')])
    if not dec.packed_attention: sys.exit(f"{a.target}: attention is {t.model.config._attn_implementation!r}, not sdpa: nothing to compare")
    impls = ('sdpa', PACKED_SDPA, 'exact')
    print(f"{a.target} {t.dtype} on {t.device}, {torch.get_num_threads()} threads; {a.tokens}-token verify vs a one-token step")
    rows = []
    for n in (int(x) for x in a.contexts.split(',')):
        g = torch.Generator().manual_seed(n)
        prompt = torch.randint(100, t.vocab_size - 100, (n,), generator=g).tolist()
        dec.reset(); dec.forward(prompt, last_only=True)
        L = dec.length
        times = {k: [] for k in ('plain_sdpa', 'plain', *impls)}
        same = exact_same = step_same = True
        for i in range(a.reps + 5):
            toks = torch.randint(100, t.vocab_size - 100, (a.tokens,), generator=g).tolist()
            outs = {}
            for k in impls:
                t.model.set_attn_implementation(PACKED_SDPA if k == 'exact' else k)
                t0 = time.perf_counter(); outs[k] = dec.forward(toks, exact_rows=k == 'exact'); dt = time.perf_counter() - t0
                crop_cache(dec.cache, L)
                if i >= 5: times[k].append(dt)
            same &= all(torch.equal(x, y) for x, y in zip(outs['sdpa'], outs[PACKED_SDPA]))
            steps = {}
            for k in ('plain_sdpa', 'plain'):   # plain decoding's one token: transformers' sdpa (enable_gqa on a CPU), and packed
                t.model.set_attn_implementation('sdpa' if k == 'plain_sdpa' else PACKED_SDPA)
                t0 = time.perf_counter(); steps[k] = dec.forward(toks[:1], last_only=True); dt = time.perf_counter() - t0
                crop_cache(dec.cache, L)
                if i >= 5: times[k].append(dt)
            step_same &= all(torch.equal(x, y) for x, y in zip(steps['plain_sdpa'], steps['plain']))
            exact_same &= torch.equal(steps['plain'][0][0], outs['exact'][0][0])
        ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        r = dict(context=n, plain_ms=ms['plain'], plain_sdpa_ms=ms['plain_sdpa'], plain_packed_speedup=ms['plain_sdpa'] / ms['plain'],
                 plain_identical=bool(step_same), verify_sdpa_ms=ms['sdpa'], verify_packed_ms=ms[PACKED_SDPA],
                 verify_cost_sdpa=ms['sdpa'] / ms['plain'], verify_cost_packed=ms[PACKED_SDPA] / ms['plain'],
                 packed_speedup=ms['sdpa'] / ms[PACKED_SDPA], identical=bool(same),
                 verify_exact_ms=ms['exact'], verify_cost_exact=ms['exact'] / ms['plain'], exact_first_row_is_the_step=bool(exact_same))
        rows.append(r)
        print(f"  context {n:5d}: plain step {r['plain_ms']:.2f} ms packed, {r['plain_sdpa_ms']:.2f} ms sdpa ({r['plain_packed_speedup']:.3f}x, "
              f"bit for bit: {step_same}); verify sdpa {r['verify_sdpa_ms']:.2f} ms = {r['verify_cost_sdpa']:.3f} steps, "
              f"packed {r['verify_packed_ms']:.2f} ms = {r['verify_cost_packed']:.3f} steps ({r['packed_speedup']:.3f}x); "
              f"exact rows {r['verify_exact_ms']:.2f} ms = {r['verify_cost_exact']:.3f} steps; sdpa = packed bit for bit: {same}, "
              f"exact's first row = the one-token step: {exact_same}")
    t.model.set_attn_implementation(PACKED_SDPA)
    doc = dict(machine=machine_info(), target=a.target, dtype=str(t.dtype), device=str(t.device), threads=torch.get_num_threads(), tokens=a.tokens,
               reps=a.reps, aux=a.aux, rows=rows)
    if a.json:
        with open(a.json, 'w') as f: json.dump(doc, f, indent=1)
    return 0 if all(r['identical'] and r['plain_identical'] and r['exact_first_row_is_the_step'] for r in rows) else 1


if __name__ == '__main__':
    sys.exit(main())
