#!/usr/bin/env python
"""Real vLLM serving one drafter under several server settings, each against plain vLLM of the same settings, in one run.

For each variant a plain server and one serving the drafter (the speculators export, an EAGLE-3 chain) start together; the
same greedy requests then go one at a time in blocks, plain and speculative in ABBA order (P S S P, then S P P S, ...) with a
pause between blocks: the servers' workers are pinned to the same core and spin for a while after their last request, so the
two servers are never timed against each other's tail. Per variant: tokens/s of each (all blocks), the speed-up, τ by vLLM's
counters, and where a speculative iteration's time goes (`vllm.iteration_cost` on vLLM's own iteration log: a plain step, a
speculative iteration, the wall time outside both, the break-even τ), and each phase by vLLM's own request timings
(`phases`, by `vllm.phase_times`: prefill and decode seconds from its request histograms, prompt tokens served from the
prefix cache; the decode phase's tokens/s and speed-up, which is the part speculative decoding changes).

The same prompts go in every block, so with prefix caching on (as the eval's servers run) a server prefills each prompt
only in its first block and later blocks are mostly decode; `--no-prefix-caching` prefills every request afresh, as the
in-process eval does and as new prompts would be.

Variants (comma-separated):
  eager     eagle_nb's eval servers as they are (--enforce-eager)
  compile   vLLM's default torch.compile (start-up takes minutes on a CPU)
  preload   eager with the libraries of --preload in LD_PRELOAD (vLLM's CPU docs ask for Intel OpenMP and tcmalloc:
            e.g. libiomp5.so from the `intel-openmp` wheel, libtcmalloc_minimal.so.4 from Debian's libtcmalloc-minimal4)
  threads2  eager with the worker unpinned on 2 threads (VLLM_CPU_OMP_THREADS_BIND=nobind, OMP_NUM_THREADS=2)
  nolog     eager without vLLM's iteration log (--enable-logging-iteration-details, which the eval turns on): what the log
            itself costs, set beside `eager` (no cost line: nothing to read)
  default   vLLM as a user starts it: its default torch.compile and no iteration log (no cost line)
  fp32      eager in float32 (every other variant runs --dtype bfloat16, as eagle_nb's servers did before `vllm_dtype`): on a
            CPU without AMX or AVX512-BF16 vLLM's bf16 products are emulated
  fp32default  `default` in float32

  .venv/bin/python bench/bench_vllm_serving.py --drafter RUN/drafter --dataset RUN/data [--variants eager,compile]
        [--prompts humaneval,sharegpt-heldout,configs/prompts/stdlib.jsonl] [--limit 8] [--max-new-tokens 64] [--num-steps 3]
        [--rounds 1] [--preload LIB[:LIB]] [--no-prefix-caching] [--json OUT]
"""
import argparse, json, os, sys, time
from pathlib import Path

from eagle_nb.core import machine_info, atomic_write_json
from eagle_nb.target import load_target
from eagle_nb.eval import load_eval_prompts
from eagle_nb.drafter import export_speculators
from eagle_nb.vllm import (start_logged_server, start_vllm_server, serving_context, served_model, _generate, _load_drafter_for_export,
                           _target_dir, spec_counters, vllm_metrics, acceptance_from_counters, log_size, iteration_times, iteration_cost,
                           phase_times, decode_speedup)


def settings(name: str, preload: str) -> dict:
    if name == 'eager': return dict(eager=True, env={})
    if name == 'nolog': return dict(eager=True, env={}, log=False)
    if name == 'compile': return dict(eager=False, env={})
    if name == 'default': return dict(eager=False, env={}, log=False)
    if name == 'fp32': return dict(eager=True, env={}, dtype='float32')
    if name == 'fp32default': return dict(eager=False, env={}, log=False, dtype='float32')
    if name == 'preload':
        if not preload: sys.exit("the preload variant needs --preload LIB[:LIB] (e.g. libiomp5.so and libtcmalloc_minimal.so.4)")
        missing = [p for p in preload.split(':') if not Path(p).exists()]
        if missing: sys.exit(f"--preload: no such file {missing}")
        return dict(eager=True, env=dict(LD_PRELOAD=preload))
    if name == 'threads2': return dict(eager=True, env=dict(VLLM_CPU_OMP_THREADS_BIND='nobind', OMP_NUM_THREADS='2'))
    sys.exit(f"unknown variant {name!r}: use eager, compile, preload, threads2, nolog, default, fp32 or fp32default")


def run_variant(name, cfg, target, tdir, spec_cfg, prompts, max_new, rounds, run_dir, label, prefix_caching=True) -> dict:
    ml = serving_context(target, prompts, max_new)
    t0 = time.time()
    srv = {}
    try:
        for k in ('plain', 'spec'):   # one after the other: two compiling at once on 2 cores only makes both slower
            start = start_logged_server if cfg.get('log', True) else start_vllm_server
            srv[k] = start(tdir, run_dir/label, name=f'vllm-{k}', prefix_caching=prefix_caching, max_model_len=ml, eager=cfg['eager'],
                           dtype=cfg.get('dtype', 'bfloat16'), env=cfg['env'], speculative=spec_cfg if k == 'spec' else None, startup_timeout=1800)
        startup = time.time() - t0
        urls = {k: s.url for k, s in srv.items()}
        names = {k: served_model(u)['id'] for k, u in urls.items()}
        ids = [p.input_ids for p in prompts]
        for k in urls: _generate(urls[k], names[k], ids[:2], 16, 1)            # warm-up, uncounted
        m0 = {k: vllm_metrics(u) for k, u in urls.items()}
        c0 = spec_counters(m0['spec'])
        time.sleep(1)
        at = {k: log_size(s.log_path) for k, s in srv.items()}
        order = []
        for r in range(rounds): order += ['plain', 'spec', 'spec', 'plain'] if r % 2 == 0 else ['spec', 'plain', 'plain', 'spec']
        secs, toks, blocks, outs = {'plain': 0.0, 'spec': 0.0}, {'plain': 0, 'spec': 0}, [], {}
        for k in order:
            time.sleep(3)
            o, t = _generate(urls[k], names[k], ids, max_new, 1)
            n = sum(map(len, o))
            secs[k] += t; toks[k] += n; outs.setdefault(k, o)
            blocks.append(dict(server=k, tokens_per_s=n / t))
            print(f"  {name}: {k} {n / t:.1f} tokens/s", flush=True)
        time.sleep(1)
        m1 = {k: vllm_metrics(u) for k, u in urls.items()}
        acc = acceptance_from_counters(c0, spec_counters(m1['spec']))
        phases = {k: phase_times(m0[k], m1[k]) for k in urls}
        its = {k: iteration_times(s.log_path, at[k], log_size(s.log_path)) for k, s in srv.items()}
    finally:
        for s in srv.values(): s.stop()
    n_blocks = order.count('spec')
    cost = iteration_cost(its['plain'], its['spec'], 1000 * secs['plain'] / toks['plain'],
                          1000 * secs['spec'] / (n_blocks * len(ids) + acc['drafts']))   # a prefill a prompt a block, one a verify round
    plain, spec = toks['plain'] / secs['plain'], toks['spec'] / secs['spec']
    return dict(variant=name, eager=cfg['eager'], dtype=cfg.get('dtype', 'bfloat16'), env=cfg['env'], iteration_log=cfg.get('log', True), startup_s=startup, plain_tokens_per_s=plain, spec_tokens_per_s=spec,
                speedup=spec / plain, tau=acc['tau'], alpha=acc['alpha'], blocks=blocks, cost=cost, prefix_caching=prefix_caching,
                phases=phases, decode_speedup=decode_speedup(phases),
                outputs_equal=sum(a == b for a, b in zip(outs['plain'], outs['spec'])), prompts=len(ids))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--target', default='smollm2-135m')
    ap.add_argument('--drafter', required=True, help='drafter checkpoint directory (or random-init)')
    ap.add_argument('--dataset', default='', help='the run\'s prepared data (for sharegpt-heldout)')
    ap.add_argument('--prompts', default='humaneval,sharegpt-heldout,configs/prompts/stdlib.jsonl')
    ap.add_argument('--limit', type=int, default=8, help='prompts a set')
    ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--num-steps', type=int, default=3, help='drafts a verify round (vLLM num_speculative_tokens)')
    ap.add_argument('--variants', default='eager,compile')
    ap.add_argument('--rounds', type=int, default=1, help='ABBA rounds a variant (each: 2 blocks of every prompt a server)')
    ap.add_argument('--preload', default='', help='LD_PRELOAD of the preload variant')
    ap.add_argument('--no-prefix-caching', action='store_true', help='prefill every request afresh (the same prompts go in every block)')
    ap.add_argument('--run-dir', default='', help='server logs and the export (default: a temporary folder under runs_dir())')
    ap.add_argument('--json', default='', help='write the results here')
    a = ap.parse_args()
    variants = [v for v in a.variants.split(',') if v]
    cfgs = {v: settings(v, a.preload) for v in variants}          # refuse a bad variant before minutes of start-up
    from eagle_nb.core import runs_dir
    run_dir = Path(a.run_dir) if a.run_dir else runs_dir()/f"bench-vllm-serving-{time.strftime('%Y%m%d-%H%M%S')}"
    target = load_target(a.target)
    prompts = load_eval_prompts(a.prompts, target.tokenizer, a.limit or None, a.dataset or None)
    tdir = _target_dir(target)
    spec_dir = export_speculators(_load_drafter_for_export(a.drafter, target), run_dir/'speculators', speculative_tokens=a.num_steps,
                                  verifier_name=str(tdir))
    spec_cfg = dict(model=str(spec_dir), method='eagle3', num_speculative_tokens=a.num_steps)
    rows, machine = [], machine_info()
    def write():   # after every variant, so one that fails later (a server that refuses a setting) loses nothing finished
        if a.json: atomic_write_json(Path(a.json), dict(machine=machine, target=a.target, drafter=a.drafter, prompts=a.prompts, limit=a.limit,
                                                        max_new_tokens=a.max_new_tokens, num_steps=a.num_steps, rounds=a.rounds,
                                                        prefix_caching=not a.no_prefix_caching, variants=rows,
                                                        command=' '.join(sys.argv), complete=len(rows) == len(variants)))
    for v in variants:
        print(f"{v}: starting plain and speculative vLLM", flush=True)
        rows.append(run_variant(v, cfgs[v], target, tdir, spec_cfg, prompts, a.max_new_tokens, a.rounds, run_dir, f'{len(rows)}-{v}',
                                prefix_caching=not a.no_prefix_caching))
        r, c = rows[-1], rows[-1]['cost'] or {}
        print(f"{v}: plain {r['plain_tokens_per_s']:.1f}, spec {r['spec_tokens_per_s']:.1f} tokens/s = {r['speedup']:.3f}x at tau {r['tau']:.3f}; "
              + (f"plain step {c['plain_step_ms']:.1f} ms, speculative iteration {c['spec_iteration_ms']:.1f} ms = "
                 f"{c['spec_iteration_in_plain_steps']:.2f} plain steps, outside {c['outside_ms']['plain']:.1f} vs {c['outside_ms']['spec']:.1f} ms, "
                 f"break-even tau {c['break_even_tau']:.2f}" if c else 'no iteration lines read'), flush=True)
        ph = r['phases']
        print(f"{v}: by vLLM's request timings: prefill {ph['plain']['prefill_s']:.1f} vs {ph['spec']['prefill_s']:.1f} s "
              f"({ph['plain']['cached_share'] or 0:.0%} / {ph['spec']['cached_share'] or 0:.0%} of prompt tokens cached), decode "
              f"{ph['plain']['decode_tokens_per_s'] or 0:.1f} vs {ph['spec']['decode_tokens_per_s'] or 0:.1f} tokens/s = "
              f"{r['decode_speedup'] or 0:.3f}x", flush=True)
        write()
    if a.json: print(f"wrote {a.json}")


if __name__ == '__main__':
    main()
