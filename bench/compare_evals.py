#!/usr/bin/env python
"""Several `eagle-nb eval` reports of one drafter side by side, in one small JSON: per report its settings (exact asked
and used), τ / α_k, plain and speculative tokens/s, speed-up, the round's costs in plain steps, break-even τ, per-set
τ and speed-up, and how many outputs were plain greedy's token for token (the others: first differing at a bf16 tie?).

    python bench/compare_evals.py OUT.json NAME=EVAL.json [NAME=EVAL.json ...]
"""
import json, sys
from pathlib import Path
from eagle_nb.core import machine_info


def output_counts(ev: dict) -> dict:
    "Prompts, outputs plain greedy's token for token, and the others that first differ at a bf16 tie (bench/summarize_run.py too)."
    ps = ev.get('prompts', [])
    return dict(prompts=len(ps), identical=sum(bool(p['lossless']) for p in ps),
                differ_at_tie=sum(1 for p in ps if not p['lossless'] and p.get('difference_at_tie')))


def summary(ev: dict) -> dict:
    m, sp, be = ev['metrics']['all'], ev['speed']['all'], ev['break_even']['all']
    return dict(config={k: ev['config'].get(k) for k in ('prompts', 'limit', 'max_new_tokens', 'num_steps', 'int8', 'exact')},
                exact=ev.get('exact'), threads=ev.get('threads'), tau=m['accept_length'], alpha=m['alpha'],
                plain_tokens_per_s=sp['plain_tokens_per_s'], spec_tokens_per_s=sp['spec_tokens_per_s'], speedup=sp['speedup'],
                costs={k: be[k] for k in ('plain_ms_per_token', 'verify_cost', 'draft_step_cost', 'rest_cost', 'tau_break_even', 'predicted_speedup')},
                by_set={k: dict(tau=v['accept_length'], speedup=ev['speed']['by_set'][k]['speedup']) for k, v in ev['metrics']['by_set'].items()},
                outputs=output_counts(ev))


def main(argv):
    if len(argv) < 2 or not all('=' in a for a in argv[1:]): sys.exit(__doc__)
    runs = {k: summary(json.loads(Path(p).read_text())) for k, p in (a.split('=', 1) for a in argv[1:])}
    Path(argv[0]).write_text(json.dumps(dict(machine=machine_info(), evals=runs), indent=1))
    for k, r in runs.items():
        print(f"{k:>12}: tau {r['tau']:.3f}, plain {r['plain_tokens_per_s']:.1f} tok/s, {r['speedup']:.3f}x, verify {r['costs']['verify_cost']:.2f} "
              f"plain steps, break-even {r['costs']['tau_break_even']:.2f}, identical {r['outputs']['identical']}/{r['outputs']['prompts']}")


if __name__ == '__main__':
    main(sys.argv[1:])
