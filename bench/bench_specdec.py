#!/usr/bin/env python
"""Speculative vs plain greedy decoding of SmolLM2-135M-Instruct on this machine, measured in one run.

For every drafter (a trained EAGLE-3 checkpoint given with --drafter, the training-free n-gram drafter, and the
`replay` oracle that proposes the target's own greedy output), on the same prompts and in the same process:
plain greedy decoding and speculative decoding run back to back per prompt (eagle_nb.eval.evaluate), each output
is checked against plain greedy (lossless: identical tokens; in bf16 also "up to numerical ties", see 04_eval),
and the ratio of tokens/s is printed, by wall clock and per CPU-second of this process (the latter survives a
shared, oversubscribed machine). The replay oracle is the UPPER BOUND for the given --num-steps (every draft
accepted: tau = num_steps + 1), not a drafter anyone can train; without --drafter it is the headline number.

Usage:
  bench/bench_specdec.py [--drafter CKPT] [--prompts humaneval] [--limit 6] [--max-new-tokens 128]
                         [--num-steps 3] [--topk 1 --num-draft-tokens N] [--dtype bf16|fp32] [--threads 1] [--json]
On a shared 2-core machine pass --threads 1 (OpenMP barriers on oversubscribed cores slow every small op).
"""
import argparse, json, os, sys, time
import torch

os.environ.setdefault('EAGLE_NB_PROGRESS', '0')
from eagle_nb.core import pick_device
from eagle_nb.target import load_target
from eagle_nb.specdec import SpecConfig
from eagle_nb.eval import load_eval_prompts, load_proposer_factory, evaluate


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--target', default='smollm2-135m')
    ap.add_argument('--drafter', default='', help='trained drafter checkpoint (eagle-nb train / SGLang export); the goal is >= 2x')
    ap.add_argument('--baselines', default='ngram,replay', help='reference drafters to run too, comma-separated (ngram, replay, '
                    'random-init: an untrained EAGLE-3 drafter, tau ~ 1 but the real drafting cost); empty for none')
    ap.add_argument('--prompts', default='humaneval'); ap.add_argument('--dataset', default='')
    ap.add_argument('--limit', type=int, default=6); ap.add_argument('--max-new-tokens', type=int, default=128)
    ap.add_argument('--num-steps', type=int, default=3); ap.add_argument('--topk', type=int, default=1)
    ap.add_argument('--num-draft-tokens', type=int, default=0)
    ap.add_argument('--dtype', default='bf16', choices=['bf16', 'fp32'])
    ap.add_argument('--threads', type=int, default=0, help='torch threads (0 = torch default)')
    ap.add_argument('--device', default=None); ap.add_argument('--json', action='store_true')
    a = ap.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    dev = pick_device(a.device)
    t = load_target(a.target, dtype=torch.bfloat16 if a.dtype == 'bf16' else torch.float32, device=dev)
    prompts = load_eval_prompts(a.prompts, t.tokenizer, a.limit, a.dataset or None)
    spec = SpecConfig(num_steps=a.num_steps, topk=a.topk, num_draft_tokens=a.num_draft_tokens or None, max_new_tokens=a.max_new_tokens)
    drafters = ([a.drafter] if a.drafter else []) + [b for b in a.baselines.split(',') if b]
    print(f"# {t} on {dev}, {torch.get_num_threads()} threads; {len(prompts)} prompts ({a.prompts}), {a.max_new_tokens} new tokens; "
          f"num_steps={spec.num_steps} topk={spec.topk} num_draft_tokens={spec.num_draft_tokens}", flush=True)
    results = {}
    for name in drafters:
        factory, desc = load_proposer_factory(name, t, config=spec)
        t0 = time.time()
        res = evaluate(t, factory, prompts, spec)
        m, v = res.metrics(), res.speed()
        results[name] = dict(drafter=desc, tau=m['accept_length'], alpha=m['alpha'], draft_acceptance_rate=m['draft_acceptance_rate'],
                             plain_tokens_per_s=v['plain_tokens_per_s'], spec_tokens_per_s=v['spec_tokens_per_s'],
                             speedup=v['speedup'], cpu_speedup=v['cpu_speedup'], lossless=v['lossless'],
                             lossless_up_to_ties=v['lossless_up_to_ties'],
                             exact_prompts=sum(bool(r['lossless']) for r in res.rows), prompts=len(res.rows),
                             draft_s=sum(r['draft_s'] for r in res.rows), verify_s=sum(r['verify_s'] for r in res.rows),
                             verify_count=m['verify_count'], seconds=time.time() - t0)
        r = results[name]
        label = desc['kind'] + (' (UPPER BOUND: oracle replay of the target, not a drafter)' if desc['kind'] == 'replay' else '')
        print(f"{name:>14}: tau {r['tau']:.2f}  plain {r['plain_tokens_per_s']:.1f} tok/s  spec {r['spec_tokens_per_s']:.1f} tok/s  "
              f"speedup {r['speedup']:.2f}x wall, {r['cpu_speedup']:.2f}x per CPU-s  "
              f"lossless {r['exact_prompts']}/{r['prompts']} exact, up to ties: {r['lossless_up_to_ties']}  [{label}]", flush=True)
        # cost model: a round costs (draft + verify); plain costs one forward per token. tau needed for 2x:
        n = max(1, r['verify_count'])
        per_tok = sum(x['plain_s'] for x in res.rows) / max(1, sum(x['plain_tokens'] for x in res.rows))
        rd, rv = r['draft_s'] / n, r['verify_s'] / n
        r.update(round_draft_ms=1000 * rd, round_verify_ms=1000 * rv, plain_token_ms=1000 * per_tok,
                 tau_for_2x=2 * (rd + rv) / per_tok)
        print(f"{'':>14}  per round: draft {1000 * rd:.1f} ms + verify {1000 * rv:.1f} ms; plain {1000 * per_tok:.1f} ms/token "
              f"(prefill included) -> this drafter's cost needs tau >= {r['tau_for_2x']:.2f} for 2x", flush=True)
    if a.json: print(json.dumps(dict(target=t.describe(), device=str(dev), threads=torch.get_num_threads(), spec=vars(spec),
                                     prompts=a.prompts, limit=a.limit, results=results), indent=1))
    ok = all(r['lossless_up_to_ties'] for r in results.values())
    if not ok: print('FAIL: speculative output differs from plain greedy beyond numerical ties', file=sys.stderr)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
