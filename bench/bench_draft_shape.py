#!/usr/bin/env python
"""Which draft shape pays most on this machine: one trained drafter, plain greedy decoding and several speculative shapes
(chains of 1-4 steps, EAGLE-2 dynamic trees), measured side by side in one run on the same prompts.

τ is the drafter's, but the speed-up is the machine's: a verify forward of k tokens costs about one plain step when the
target is overhead-bound (a small model on a CPU) and k plain steps when it is compute-bound (a large one on a GPU at
batch 1 it is neither), so the shape that pays most moves with the hardware. Per prompt, plain decoding runs once and
every shape after it, the order rotated from prompt to prompt so drift and cache warmth fall on every shape alike; each
output is checked against plain greedy (identical, or parting only at a numerical tie: see 04_eval). Several drafters
(`--drafter NAME=DIR`, repeated) are measured in the same run against the same plain decoding, every (drafter, shape)
pair in the rotation: the way to compare drafters' speed-ups, which move with the machine's load between runs. A shape is
`STEPS` (a chain) or `STEPS:TOPK:DRAFT_TOKENS` (a tree: SGLang's --speculative-num-steps / -eagle-topk / -num-draft-tokens),
either followed by `@P` for dynamic draft length (SpecConfig.min_draft_prob: no draft below cumulative probability P); with
fixed chains of 1 step and more in the run, it prints the floor above which a draft pays on this machine. `idle` counts the
drafter forwards a round ran whose drafts were all dropped (below the floor, or outbid by shallower nodes): time a
floor cannot save.

    python bench/bench_draft_shape.py --drafter RUN/drafter --dataset RUN/data --limit 8 --max-new-tokens 64 \
        --shapes 1,2,3,3@0.1,3:4:8,5:8:16@0.14 --json bench/results/draft_shape.json
    python bench/bench_draft_shape.py --drafter ttt7=RUN/drafter --drafter ttt3=OTHER/drafter --dataset RUN/data --shapes 1,3
"""
import argparse, json, os, statistics, sys, time
from dataclasses import replace
from pathlib import Path
import torch

os.environ.setdefault('EAGLE_NB_PROGRESS', '0')
from eagle_nb.core import machine_info
from eagle_nb.target import load_target
from eagle_nb.specdec import SpecConfig, TargetDecoder, generate_plain, speculative_generate
from eagle_nb.eval import at_tie, checkpoint_dataset, first_difference, load_eval_prompts, load_proposer_factory, tie_tolerance

ROOT = Path(__file__).resolve().parents[1]


def parse_shape(s: str, max_new_tokens: int) -> tuple[str, SpecConfig]:
    "'3' -> a 3-step chain; '3:4:8' -> 3 steps, top-4, 8 tokens verified (root included); '@P' after either: min_draft_prob P."
    s, _, floor = s.partition('@')
    parts, p = [int(x) for x in s.split(':')], float(floor or 0)
    at = f' @{p:g}' if p else ''
    if len(parts) == 1:
        return f'chain {parts[0]}{at}', SpecConfig(num_steps=parts[0], max_new_tokens=max_new_tokens, min_draft_prob=p)
    steps, topk, n = parts
    return f'tree {steps}/{topk}/{n}{at}', SpecConfig(num_steps=steps, topk=topk, num_draft_tokens=n,
                                                       max_new_tokens=max_new_tokens, min_draft_prob=p)


def parse_drafters(specs: list[str]) -> list[tuple[str, str]]:
    "`DIR`, `random-init` or `NAME=DIR` each -> (name, dir); a lone drafter keeps the name '' (rows as before)."
    auto = lambda s: Path(s).parent.name if Path(s).name == 'drafter' else Path(s).name   # RUN/drafter -> RUN's name
    out = [tuple(s.split('=', 1)) if '=' in s else (auto(s) if len(specs) > 1 else '', s) for s in specs]
    names = [n for n, _ in out]
    if len(set(names)) != len(names): raise SystemExit(f'--drafter names must differ (got {names}); name them NAME=DIR')
    return out


def training(path: str) -> dict|None:
    "What a checkpoint's training cost and reached, from its train_config.json, metrics.jsonl and eval.json (None: not a trained checkpoint)."
    d = Path(path)
    if not (d/'metrics.jsonl').exists(): return None
    recs = [json.loads(l) for l in (d/'metrics.jsonl').read_text().splitlines() if l.strip()]
    tr = [r for r in recs if r.get('kind') == 'train']
    if not tr: return None
    tc = json.loads((d/'train_config.json').read_text()) if (d/'train_config.json').exists() else {}
    ev = json.loads((d/'eval.json').read_text()) if (d/'eval.json').exists() else {}
    return dict({k: tc.get(k) for k in ('ttt_steps', 'ttt_align', 'epochs', 'lr', 'init_lm_head', 'draft_vocab_size', 'max_len')},
                steps=len(tr), tokens=sum(r.get('tokens', 0) for r in tr), seconds=round(sum(r.get('seconds', 0.0) for r in tr), 1),
                tokens_per_s_median=statistics.median(r['tokens_per_s'] for r in tr[len(tr) // 10:]),
                heldout_acc=ev.get('acc'), heldout_tau_sim=ev.get('tau_sim'), heldout_acc_chain=ev.get('acc_chain'),
                heldout_samples=ev.get('samples'))


def draft_floor(rows: list[dict]) -> dict|None:
    "From the fixed chains measured (1 step and the longest): what one more draft token costs, and the acceptance it needs to pay."
    fixed = {r['num_steps']: r for r in rows if r['topk'] == 1 and not r['min_draft_prob']}   # --exact makes every chain exact, so these compare alike
    if 1 not in fixed or len(fixed) < 2: return None
    one, k = fixed[1], max(fixed)
    long = fixed[k]
    per_draft = ((long['draft_ms_per_round'] + long['verify_ms_per_round']) - (one['draft_ms_per_round'] + one['verify_ms_per_round'])) / (k - 1)
    per_token = (one['draft_ms_per_round'] + one['verify_ms_per_round']) / one['tau']
    return dict(ms_per_draft=per_draft, ms_per_token=per_token, min_draft_prob=max(0.0, per_draft / per_token), from_chains=[1, k])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--target', default='smollm2-135m')
    ap.add_argument('--drafter', action='append', default=[], help='drafter checkpoint directory (eagle-nb train --out), or NAME=DIR, '
                    'repeated to measure several in one run; random-init (untrained: τ ~ 1, the real drafting cost) without one')
    ap.add_argument('--prompts', default=f'humaneval,sharegpt-heldout,{ROOT}/configs/prompts/stdlib.jsonl')
    ap.add_argument('--dataset', default='', help="prepared dataset whose held-out split 'sharegpt-heldout' reads")
    ap.add_argument('--limit', type=int, default=8, help='prompts per set')
    ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--shapes', default='1,2,3,4,3:4:8,4:4:12', help='comma-separated: STEPS (chain) or STEPS:TOPK:DRAFT_TOKENS (tree), either with @P for min_draft_prob P')
    ap.add_argument('--int8', choices=('off', 'on', 'both'), default='off',
                    help="drafters' linear layers in int8 (specdec.int8_drafter, CPU only); both: each drafter twice, NAME and NAME-int8")
    ap.add_argument('--exact', action='store_true', help="chains: verify each row's attention as a one-token step computes it "
                    "(SpecConfig.exact: output plain greedy's bit for bit), their names end in 'exact'; trees keep the masked verify")
    ap.add_argument('--json', default='', help='write the results here too')
    a = ap.parse_args()
    target = load_target(a.target)
    drafters = []   # (name, factory, description, its checkpoint's dataset)
    specs = parse_drafters(a.drafter or ['random-init'])
    if a.int8 == 'both':   # NAME and NAME-int8; a lone unnamed drafter: bf16 and int8
        specs = [((f'{n}-int8' if n else 'int8') if i8 else (n or 'bf16'), p, i8) for n, p in specs for i8 in (False, True)]
    else: specs = [(n, p, a.int8 == 'on') for n, p in specs]
    for name, path, i8 in specs:
        factory, desc = load_proposer_factory(path, target, int8=i8)
        t = training(path)
        drafters.append((name, factory, desc | ({'training': t} if t else {}), checkpoint_dataset(path) if Path(path).is_dir() else None))
        if t and not i8:
            acc = ' / '.join(f'{x:.3f}' for x in (t['heldout_acc'] or []))
            print(f"{name or path}: TTT {t['ttt_steps']}, {t['steps']:,} steps, {t['tokens']:,} tokens in {t['seconds']:.0f} s of steps "
                  f"(median {t['tokens_per_s_median']:.0f} tokens/s); held-out top-1 by TTT position {acc}")
    # every (drafter, shape) pair; a lone drafter's shapes keep their plain names
    shapes = [(f'{d[0]}: {name}' if d[0] else name, cfg, d) for d in drafters
              for name, cfg in (parse_shape(s, a.max_new_tokens) for s in a.shapes.split(',') if s)]
    if a.exact:   # SpecConfig.exact is for chains; a tree keeps the masked verify (its rows are not a prefix of each other)
        shapes = [(name + (' exact' if cfg.chain else ''), replace(cfg, exact=cfg.chain), d) for name, cfg, d in shapes]
    dataset = a.dataset or drafters[0][3]
    if len({str(d[3]) for d in drafters}) > 1:
        print(f'note: the drafters were trained from different datasets; held-out prompts come from {dataset}, which another drafter may have trained on')
    sets = a.prompts
    if not dataset and 'sharegpt-heldout' in sets.split(','):   # an untrained drafter has no held-out split to read
        sets = ','.join(s for s in sets.split(',') if s != 'sharegpt-heldout')
        print(f"no --dataset (and no checkpoint's): sharegpt-heldout left out; prompt sets {sets}")
    prompts = load_eval_prompts(sets, target.tokenizer, a.limit or None, dataset)
    plain_dec = TargetDecoder(target)
    # one decoder per set of aux taps: each installs capture hooks on the shared target, and they run on every forward
    by_taps, spec_decs = {}, {}
    for d in drafters:
        ids = d[1](prompts[0], []).aux_layer_ids
        if tuple(ids) not in by_taps: by_taps[tuple(ids)] = TargetDecoder(target, ids)
        spec_decs[d[0]] = by_taps[tuple(ids)]
    tol = tie_tolerance(target.dtype)

    def plain(p, n):
        margins = []
        t0 = time.perf_counter()
        out = generate_plain(target, p.input_ids, n, decoder=plain_dec, margins=margins)
        return out, time.perf_counter() - t0, margins

    def spec(p, cfg, d):
        t0 = time.perf_counter()
        r = speculative_generate(target, d[1](p, []), p.input_ids, cfg, decoder=spec_decs[d[0]])
        return r, time.perf_counter() - t0

    for _, cfg, d in shapes: spec(prompts[0], replace(cfg, max_new_tokens=8), d)   # warm-up: each shape's first call outside the clock
    plain(prompts[0], 8)
    load0 = os.getloadavg()
    tot = {name: dict(tokens=0, seconds=0.0, rounds=0, accepted=0, drafted=0, draft_s=0.0, verify_s=0.0, lossless=0, at_tie=0, passes=0, idle=0, per=[]) for name, _, _ in shapes}
    plain_tokens, plain_s = 0, 0.0
    t_start = time.time()
    for i, p in enumerate(prompts):
        ref, tp, margins = plain(p, a.max_new_tokens)
        plain_tokens += len(ref); plain_s += tp
        k = i % len(shapes)
        for name, cfg, d in shapes[k:] + shapes[:k]:   # rotated: no shape always runs first or last
            r, ts = spec(p, cfg, d)
            t = tot[name]
            t['tokens'] += len(r.tokens); t['seconds'] += ts; t['rounds'] += r.verify_count; t['accepted'] += sum(r.accepted); t['drafted'] += sum(r.drafted)
            t['passes'] += sum(r.passes); t['idle'] += sum(r.idle)
            t['draft_s'] += r.timings['draft']; t['verify_s'] += r.timings['verify']
            diff = first_difference(r.tokens, ref)
            t['lossless'] += diff is None
            t['at_tie'] += at_tie(diff, margins, tol)
            t['per'].append(dict(set=p.set, id=p.id, tau=r.accept_length, rounds=r.verify_count, identical=diff is None))
        print(f'prompt {i + 1}/{len(prompts)} ({p.set}): {time.time() - t_start:.0f} s', flush=True)
    plain_rate = plain_tokens / plain_s
    rows = []
    for name, cfg, d in shapes:
        t = tot[name]
        rate = t['tokens'] / t['seconds']
        rows.append(dict(shape=name, drafter=d[0], exact=cfg.exact, num_steps=cfg.num_steps, topk=cfg.topk, num_draft_tokens=cfg.num_draft_tokens, min_draft_prob=cfg.min_draft_prob,
                         drafted_per_round=t['drafted'] / t['rounds'], passes_per_round=t['passes'] / t['rounds'],
                         idle_passes_per_round=t['idle'] / t['rounds'],
                         tau=(t['accepted'] + t['rounds']) / t['rounds'], tokens_per_s=rate, speedup=rate / plain_rate,
                         draft_ms_per_round=1e3 * t['draft_s'] / t['rounds'], verify_ms_per_round=1e3 * t['verify_s'] / t['rounds'],
                         verify_cost=(t['verify_s'] / t['rounds']) / (plain_s / plain_tokens),
                         lossless=t['lossless'], lossless_up_to_ties=t['lossless'] + t['at_tie'], prompts=len(prompts), per_prompt=t['per']))
    print(f"\nplain: {plain_rate:.2f} tokens/s ({1e3 * plain_s / plain_tokens:.1f} ms a token); {len(prompts)} prompts x "
          f"{a.max_new_tokens} new tokens; load {load0[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    w = max(14, *(len(r['shape']) for r in rows))
    print(f"{'shape':>{w}} {'tau':>6} {'speed-up':>9} {'draft ms':>9} {'verify ms':>10} {'verify/plain':>13} {'drafted':>8} {'idle':>6} {'lossless':>9}")
    for r in rows:
        print(f"{r['shape']:>{w}} {r['tau']:6.3f} {r['speedup']:8.3f}x {r['draft_ms_per_round']:9.1f} {r['verify_ms_per_round']:10.1f} "
              f"{r['verify_cost']:13.2f} {r['drafted_per_round']:8.2f} {r['idle_passes_per_round']:6.2f} {r['lossless_up_to_ties']:>4}/{r['prompts']}")
    best = max(rows, key=lambda r: r['speedup'])
    print(f"fastest here: {best['shape']} ({best['speedup']:.3f}x)")
    floors = {}
    for d in drafters:
        floor = floors[d[0]] = draft_floor([r for r in rows if r['drafter'] == d[0]])
        if floor: print(f"cost model from the fixed chains{' of ' + d[0] if d[0] else ''}: a draft token costs {floor['ms_per_draft']:.1f} ms "
                        f"(drafting + its verify row) and a 1-step chain makes a token every {floor['ms_per_token']:.1f} ms, so a draft pays "
                        f"where its cumulative probability is >= {floor['min_draft_prob']:.2f} (--min-draft-prob; a calibrated drafter's "
                        f"probability is its acceptance rate)")
    if a.json:
        one = len(drafters) == 1
        doc = dict(bench='draft_shape', cost_model_floor=floors[drafters[0][0]] if one else floors,
                   drafter=drafters[0][2] if one else {d[0]: d[2] for d in drafters}, dataset=dataset, prompts=sets, limit=a.limit, max_new_tokens=a.max_new_tokens,
                   plain_tokens_per_s=plain_rate, plain_ms_per_token=1e3 * plain_s / plain_tokens, shapes=rows, load_before=load0,
                   load_after=os.getloadavg(), machine=machine_info(), threads=torch.get_num_threads(),
                   command='python bench/bench_draft_shape.py ' + ' '.join(sys.argv[1:]), created=time.strftime('%Y-%m-%dT%H:%M:%S%z'))
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(doc, indent=1))


if __name__ == '__main__':
    main()
