#!/usr/bin/env python
"""Plain greedy decoding with transformers' `sdpa` attention against eagle_nb's packed attention (the default of every
`TargetDecoder`: a one-token step runs the query heads of a GQA group as rows of one KV head), on the eval's prompts,
the two alternating prompt by prompt in one process so that machine noise falls on both. Prints tokens/s of each,
their ratio, and on how many prompts the outputs are identical (the kernels differ, so bf16 ties may part them).

Usage:
  bench/bench_plain_decode.py [--target smollm2-135m] [--prompts humaneval,sharegpt-heldout,configs/prompts/stdlib.jsonl]
                              [--dataset RUN/data] [--limit 6] [--max-new-tokens 96] [--json OUT]
"""
import argparse, json, statistics, time
from eagle_nb.target import load_target
from eagle_nb.specdec import TargetDecoder, generate_plain, PACKED_SDPA
from eagle_nb.eval import load_eval_prompts
from eagle_nb.core import machine_info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--target', default='smollm2-135m')
    ap.add_argument('--prompts', default='humaneval,sharegpt-heldout,configs/prompts/stdlib.jsonl')
    ap.add_argument('--dataset', default='', help='prepared dataset whose held-out split sharegpt-heldout reads')
    ap.add_argument('--limit', type=int, default=6, help='prompts per set')
    ap.add_argument('--max-new-tokens', type=int, default=96)
    ap.add_argument('--json', default='')
    a = ap.parse_args()
    t = load_target(a.target)
    dec = TargetDecoder(t)
    if not dec.packed_attention: raise SystemExit(f"{a.target}: attention is {t.model.config._attn_implementation!r}, not sdpa")
    ps = load_eval_prompts(a.prompts, t.tokenizer, a.limit, a.dataset or None)
    generate_plain(t, ps[0].input_ids, 8, decoder=dec)   # warm-up
    runs, same = {'sdpa': [], PACKED_SDPA: []}, 0
    for i, p in enumerate(ps):
        outs = {}
        for impl in (('sdpa', PACKED_SDPA) if i % 2 == 0 else (PACKED_SDPA, 'sdpa')):
            t.model.set_attn_implementation(impl)
            t0 = time.perf_counter(); outs[impl] = generate_plain(t, p.input_ids, a.max_new_tokens, decoder=dec)
            runs[impl].append((len(outs[impl]), time.perf_counter() - t0))
        same += outs['sdpa'] == outs[PACKED_SDPA]
    t.model.set_attn_implementation(PACKED_SDPA)
    tok = {k: sum(n for n, _ in v) / sum(s for _, s in v) for k, v in runs.items()}
    doc = dict(machine=machine_info(), target=a.target, prompts=len(ps), prompt_tokens_median=statistics.median(len(p.input_ids) for p in ps),
               max_new_tokens=a.max_new_tokens, sdpa_tokens_per_s=tok['sdpa'], packed_tokens_per_s=tok[PACKED_SDPA],
               packed_speedup=tok[PACKED_SDPA] / tok['sdpa'], identical=same)
    print(f"{len(ps)} prompts (median {doc['prompt_tokens_median']:.0f} tokens), plain greedy {a.max_new_tokens} new tokens: sdpa "
          f"{tok['sdpa']:.2f} tokens/s, packed {tok[PACKED_SDPA]:.2f} tokens/s, {doc['packed_speedup']:.3f}x; identical outputs {same} of {len(ps)}")
    if a.json:
        with open(a.json, 'w') as f: json.dump(doc, f, indent=1)


if __name__ == '__main__':
    main()
