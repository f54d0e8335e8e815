#!/usr/bin/env python
"""The target's linear layers on PyTorch's products (`F.linear`) against oneDNN's on weights packed once
(`specdec.OneDnnLinear`, what a `TargetDecoder` swaps in where the target is in the CPU's decoding dtype), side by side
in one run: first each distinct linear shape of the target alone at 1, 4 and 8 rows (a decode step, a 3-step chain's
verify, a tree's), then plain greedy decoding and speculative decoding (a chain, one trained drafter) on the same prompts
with each kernel, the kernels' order alternating from prompt to prompt so that machine noise falls on both.

Per kernel it prints plain tokens/s, speculative tokens/s and their ratio, τ, the draft and verify milliseconds a round
and the verify's cost in plain steps; with `--tau T` also the speed-up that this run's cost a round predicts for a
drafter of τ T (the cost model of 04_eval: speed-up = τ × plain step / round; a prediction, labelled so). Each output is
checked against its own kernel's plain greedy (identical, or parting at a bf16 tie: 04_eval), and the two kernels' plain
outputs against each other.

    python bench/bench_linear_kernel.py --drafter RUN/drafter --dataset RUN/data --limit 8 --max-new-tokens 64 \\
        --tau 1.639 --json bench/results/linear_kernel.json
"""
import argparse, json, os, sys, time
from pathlib import Path
import torch

os.environ.setdefault('EAGLE_NB_PROGRESS', '0')
from eagle_nb.core import machine_info
from eagle_nb.target import load_target
from eagle_nb.specdec import (SpecConfig, TargetDecoder, generate_plain, speculative_generate, onednn_linears, restore_linears,
                              linear_kernel, OneDnnLinear)
from eagle_nb.eval import at_tie, checkpoint_dataset, first_difference, load_eval_prompts, load_proposer_factory, tie_tolerance

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ('default', 'onednn')


def set_kernel(model, kernel: str):
    "Put `model`'s linear layers on `kernel`: PyTorch's products ('default') or oneDNN's on packed weights ('onednn')."
    if kernel == 'onednn': onednn_linears(model)
    else: restore_linears(model)
    assert linear_kernel(model) == kernel, (linear_kernel(model), kernel)


def time_call(f, reps: int) -> float:
    "Median seconds of `reps` calls of `f` (after two outside the clock)."
    f(); f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def shape_table(model, rows=(1, 4, 8), reps: int = 30) -> list[dict]:
    "Each distinct linear shape of `model` alone: milliseconds and weight GB/s of each kernel at each row count."
    seen, out = {}, []
    for m in model.modules():
        if type(m) is torch.nn.Linear: seen.setdefault(tuple(m.weight.shape), m)
    g = torch.Generator().manual_seed(0)
    for shape, lin in seen.items():
        packed = OneDnnLinear(lin)
        gb = lin.weight.numel() * lin.weight.element_size() / 1e9
        for r in rows:
            x = torch.randn(r, shape[1], generator=g).to(lin.weight.dtype)
            with torch.inference_mode():
                a = time_call(lambda: torch.nn.functional.linear(x, lin.weight, lin.bias), reps)
                b = time_call(lambda: packed(x), reps)
            out.append(dict(shape=list(shape), rows=r, default_ms=1e3 * a, onednn_ms=1e3 * b, default_gb_s=gb / a, onednn_gb_s=gb / b,
                            onednn_speedup=a / b))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--target', default='smollm2-135m')
    ap.add_argument('--drafter', default='random-init', help='drafter checkpoint directory (eagle-nb train --out); random-init: untrained (τ ~ 1)')
    ap.add_argument('--prompts', default=f'humaneval,sharegpt-heldout,{ROOT}/configs/prompts/stdlib.jsonl')
    ap.add_argument('--dataset', default='', help="prepared dataset whose held-out split 'sharegpt-heldout' reads (default: the drafter's)")
    ap.add_argument('--limit', type=int, default=8, help='prompts per set')
    ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--num-steps', type=int, default=3, help='draft chain depth')
    ap.add_argument('--int8', choices=('on', 'off'), default='on', help="the drafter's linear layers in int8 (specdec.int8_drafter), as the profiles decode")
    ap.add_argument('--tau', type=float, default=0.0, help="also print the speed-up this run's cost a round predicts at this τ")
    ap.add_argument('--no-shapes', action='store_true', help='skip the table of linear shapes alone')
    ap.add_argument('--json', default='')
    a = ap.parse_args()
    target = load_target(a.target)
    model = target.model
    if onednn_linears(model) == 0:
        raise SystemExit(f"oneDNN linears do not apply to this target here ({target.device}, {target.dtype}): nothing to compare")
    restore_linears(model)
    shapes = [] if a.no_shapes else shape_table(model)
    if shapes:
        print(f"{'shape':>14} {'rows':>4} {'F.linear ms':>12} {'GB/s':>6} {'oneDNN ms':>10} {'GB/s':>6} {'ratio':>6}")
        for s in shapes:
            print(f"{'x'.join(map(str, s['shape'])):>14} {s['rows']:4d} {s['default_ms']:12.3f} {s['default_gb_s']:6.1f} "
                  f"{s['onednn_ms']:10.3f} {s['onednn_gb_s']:6.1f} {s['onednn_speedup']:5.2f}x")
    factory, desc = load_proposer_factory(a.drafter, target, int8=a.int8 == 'on')
    dataset = a.dataset or (checkpoint_dataset(a.drafter) if Path(a.drafter).is_dir() else None)
    sets = a.prompts if dataset else ','.join(s for s in a.prompts.split(',') if s != 'sharegpt-heldout')
    prompts = load_eval_prompts(sets, target.tokenizer, a.limit or None, dataset)
    cfg = SpecConfig(num_steps=a.num_steps, max_new_tokens=a.max_new_tokens)
    # the decoders swap nothing themselves (onednn=False): the bench puts the kernel in place before each run
    plain_dec = TargetDecoder(target, onednn=False)
    spec_dec = TargetDecoder(target, factory(prompts[0], []).aux_layer_ids, onednn=False)
    tol = tie_tolerance(target.dtype)
    for k in KERNELS:   # warm-up, outside the clock
        set_kernel(model, k)
        generate_plain(target, prompts[0].input_ids, 8, decoder=plain_dec)
        speculative_generate(target, factory(prompts[0], []), prompts[0].input_ids, SpecConfig(num_steps=a.num_steps, max_new_tokens=8), decoder=spec_dec)
    tot = {k: dict(plain_tokens=0, plain_s=0.0, tokens=0, seconds=0.0, rounds=0, accepted=0, draft_s=0.0, verify_s=0.0,
                   lossless=0, at_tie=0) for k in KERNELS}
    plain_same, load0, t_start = 0, os.getloadavg(), time.time()
    for i, p in enumerate(prompts):
        outs = {}
        for k in (KERNELS if i % 2 == 0 else KERNELS[::-1]):
            set_kernel(model, k)
            t = tot[k]
            margins = []
            t0 = time.perf_counter()
            ref = generate_plain(target, p.input_ids, a.max_new_tokens, decoder=plain_dec, margins=margins)
            t['plain_s'] += time.perf_counter() - t0; t['plain_tokens'] += len(ref)
            t0 = time.perf_counter()
            r = speculative_generate(target, factory(p, []), p.input_ids, cfg, decoder=spec_dec)
            t['seconds'] += time.perf_counter() - t0; t['tokens'] += len(r.tokens)
            t['rounds'] += r.verify_count; t['accepted'] += sum(r.accepted)
            t['draft_s'] += r.timings['draft']; t['verify_s'] += r.timings['verify']
            diff = first_difference(r.tokens, ref)
            t['lossless'] += diff is None; t['at_tie'] += at_tie(diff, margins, tol)
            outs[k] = ref
        plain_same += outs['default'] == outs['onednn']
        print(f'prompt {i + 1}/{len(prompts)} ({p.set}): {time.time() - t_start:.0f} s', flush=True)
    restore_linears(model)
    rows = {}
    for k, t in tot.items():
        plain_rate, rate = t['plain_tokens'] / t['plain_s'], t['tokens'] / t['seconds']
        step_ms, round_ms = 1e3 * t['plain_s'] / t['plain_tokens'], 1e3 * t['seconds'] / t['rounds']
        rows[k] = dict(plain_tokens_per_s=plain_rate, plain_ms_per_token=step_ms, spec_tokens_per_s=rate, speedup=rate / plain_rate,
                       tau=(t['accepted'] + t['rounds']) / t['rounds'], round_ms=round_ms,
                       draft_ms_per_round=1e3 * t['draft_s'] / t['rounds'], verify_ms_per_round=1e3 * t['verify_s'] / t['rounds'],
                       verify_cost=(1e3 * t['verify_s'] / t['rounds']) / step_ms, round_cost=round_ms / step_ms,
                       lossless=t['lossless'], lossless_up_to_ties=t['lossless'] + t['at_tie'], prompts=len(prompts))
        if a.tau: rows[k]['predicted_speedup_at_tau'] = a.tau / rows[k]['round_cost']
    print(f"\n{len(prompts)} prompts x {a.max_new_tokens} new tokens, {a.num_steps}-step chain, drafter {a.drafter} "
          f"({'int8' if a.int8 == 'on' else 'bf16'}); load {load0[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"{'kernel':>8} {'plain tok/s':>12} {'spec tok/s':>11} {'speed-up':>9} {'tau':>6} {'draft ms':>9} {'verify ms':>10} "
          f"{'verify/plain':>13} {'round/plain':>12} {'lossless':>9}" + (f" {'at tau ' + format(a.tau, 'g'):>14}" if a.tau else ''))
    for k, r in rows.items():
        print(f"{k:>8} {r['plain_tokens_per_s']:12.2f} {r['spec_tokens_per_s']:11.2f} {r['speedup']:8.3f}x {r['tau']:6.3f} "
              f"{r['draft_ms_per_round']:9.1f} {r['verify_ms_per_round']:10.1f} {r['verify_cost']:13.2f} {r['round_cost']:12.2f} "
              f"{r['lossless_up_to_ties']:>4}/{r['prompts']}" + (f" {r['predicted_speedup_at_tau']:13.3f}x" if a.tau else ''))
    d, o = rows['default'], rows['onednn']
    print(f"oneDNN against F.linear: plain {o['plain_tokens_per_s'] / d['plain_tokens_per_s']:.3f}x, speculative "
          f"{o['spec_tokens_per_s'] / d['spec_tokens_per_s']:.3f}x; the two kernels' plain outputs identical on {plain_same} of {len(prompts)}")
    if a.json:
        doc = dict(bench='linear_kernel', drafter=desc, dataset=str(dataset) if dataset else None, prompts=sets, limit=a.limit,
                   max_new_tokens=a.max_new_tokens, num_steps=a.num_steps, int8=a.int8 == 'on', tau_for_prediction=a.tau or None,
                   kernels=rows, plain_identical_across_kernels=plain_same,
                   onednn_plain_ratio=o['plain_tokens_per_s'] / d['plain_tokens_per_s'],
                   onednn_spec_ratio=o['spec_tokens_per_s'] / d['spec_tokens_per_s'], shapes=shapes,
                   load_before=load0, load_after=os.getloadavg(), machine=machine_info(), threads=torch.get_num_threads(),
                   dtype=str(target.dtype), command='python bench/bench_linear_kernel.py ' + ' '.join(sys.argv[1:]),
                   created=time.strftime('%Y-%m-%dT%H:%M:%S%z'))
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(doc, indent=1))


if __name__ == '__main__':
    main()
