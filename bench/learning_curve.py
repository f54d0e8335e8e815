#!/usr/bin/env python
"""Learning curves: held-out τ and α_k against training tokens, one drafter trained per budget (its own cosine schedule,
not a snapshot of a longer run), every drafter graded by the same decoder on the same prompts.

Each point trains `eagle_nb.train.train` on a hidden-state store for `budget / mean window length` optimizer steps (one
window a step, the default recipe) and evaluates it with `eagle_nb.eval.run_eval` (in-process speculative decoding,
checked lossless) on every prompt set given; `--vllm` adds the same prompts served by real vLLM (`vllm_spec_eval`, one
plain and one EAGLE-3 server per point). Existing drafters (e.g. the standard profile's) join with `--drafter LABEL=DIR`.
Points already measured are read back from `--out` (rerun to resume; delete a point's folder to redo it). `--online`
trains without a store, the target run in the training loop on `--data` (`TrainConfig.online`, the extractor's forward):
a point then costs only the target forwards of the tokens it trains on, not a whole store's extraction. Each point
records the CPU it ran on and the training dtype, since the same recipe lands on slightly different τ under other numerics.

    python bench/learning_curve.py --store RUN/store --data RUN/data --budgets 100000,300000 \
        --drafter standard=RUN/drafter --variant lr1e-3:lr=0.001 --out _runs/curve --json bench/results/learning_curve.json
    python bench/learning_curve.py --online --data RUN/data --budgets 100000 --no-default --variant ttt3:ttt_steps=3 \
        --out _runs/curve-online --json bench/results/learning_curve.json --merge
"""
import argparse, json, math, os, sys, time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
ap.add_argument('--store', default='', help='hidden-state store to train from (or --online)')
ap.add_argument('--online', action='store_true', help='no store: run the target inside the training loop on --data')
ap.add_argument('--target', default='smollm2-135m', help='the target (the store\'s; with --online, the one run in the loop)')
ap.add_argument('--data', required=True, help='the prepared dataset of the store (draft vocab, held-out split)')
ap.add_argument('--budgets', default='100000,300000', help='training tokens per point, comma-separated')
ap.add_argument('--variant', action='append', default=[], help="NAME:field=value[,field=value] TrainConfig changes (default recipe: 'default')")
ap.add_argument('--drafter', action='append', default=[], help='LABEL=DIR an already trained drafter to grade alike (tokens read from its metrics)')
ap.add_argument('--prompts', default=f'humaneval,sharegpt-heldout,{ROOT}/configs/prompts/stdlib.jsonl')
ap.add_argument('--limit', type=int, default=8, help='prompts per set')
ap.add_argument('--max-new-tokens', type=int, default=64)
ap.add_argument('--num-steps', type=int, default=3)
ap.add_argument('--vllm', default='', help="'all', or comma-separated labels/budgets of the points to also serve in real vLLM")
ap.add_argument('--out', default=str(ROOT/'_runs'/'curve'))
ap.add_argument('--json', default='', help='write every point here as well')
ap.add_argument('--no-default', action='store_true', help="train only the --variant recipes, not the default one")
ap.add_argument('--merge', action='store_true', help='keep the points already in --json that this run does not measure (same store)')
a = ap.parse_args()
if bool(a.store) == a.online: ap.error('give --store STORE or --online (with --data), one of them')
os.environ.setdefault('EAGLE_NB_PROGRESS', '0')

from eagle_nb.store import HiddenStateStore
from eagle_nb.core import machine_info
from eagle_nb.train import TrainConfig, train, heldout_split
from eagle_nb.eval import EvalConfig, run_eval, break_even

out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
# 'default' is the curve's reference recipe, pinned: TrainConfig's default when the first points were measured (lr 5e-4, a
# random lm_head). The default since (lr 1e-3, lm_head from the target) is the variant 'lr1e-3+init-target' on the curve.
base = TrainConfig(store=a.store, out=str(out/'_'), data=a.data, lr=5e-4, init_lm_head='random', batch_tokens=512, max_len=512, eval_fraction=0.03,
                   save_every=200, draft_vocab_size=8192, online=a.online, target=a.target if a.online else '')
if a.online:
    from eagle_nb.online import OnlineStates
    manifest = OnlineStates(a.data, a.target).manifest
else: manifest = HiddenStateStore.open(a.store).manifest
lengths = {s['id']: min(int(s['length']), base.max_len) for s in manifest['samples'] if s['length'] >= 3}
train_ids, _ = heldout_split(sorted(lengths), base.eval_fraction, base.seed)
mean_len = sum(lengths[i] for i in train_ids) / len(train_ids)
epoch_tokens = sum(lengths[i] for i in train_ids)

def parse_variant(s):
    name, _, kv = s.partition(':')
    ch = {}
    for item in filter(None, kv.split(',')):
        k, v = item.split('=', 1)
        f = type(getattr(base, k))
        ch[k] = (v.lower() in ('1', 'true', 'yes')) if f is bool else f(v)
    return name, ch

variants = ([] if a.no_default else [('default', {})]) + [parse_variant(v) for v in a.variant]
budgets = [int(float(b)) for b in a.budgets.split(',') if b]
want_vllm = set(filter(None, a.vllm.split(',')))
ecfg = dict(target=a.target, prompts=a.prompts, dataset=a.data, limit=a.limit, max_new_tokens=a.max_new_tokens, num_steps=a.num_steps)

def grade(label, ckpt: Path, point: dict) -> dict:
    done = ckpt/'curve_point.json'
    if done.exists(): point = json.loads(done.read_text())     # graded before: keep it, add what is asked for and missing
    if 'in_process' not in point:
        t0 = time.time()
        res = run_eval(EvalConfig(drafter=str(ckpt), **ecfg))
        sets = res.per_set()
        be = break_even(res)
        point.update(in_process=sets, break_even=be.get('tau_break_even'), eval_s=round(time.time() - t0, 1))
        ev = ckpt/'eval.json'
        if ev.exists(): point['heldout_windows'] = {k: json.loads(ev.read_text()).get(k) for k in ('acc', 'tau_sim')}
        done.write_text(json.dumps(point, indent=1))
    if 'vllm' not in point and (label in want_vllm or str(point.get('budget')) in want_vllm or 'all' in want_vllm):
        from eagle_nb.target import load_target
        from eagle_nb.eval import load_eval_prompts
        from eagle_nb.vllm import vllm_spec_eval
        tgt = load_target(a.target)
        prompts = load_eval_prompts(a.prompts, tgt.tokenizer, a.limit, a.data)
        t1 = time.time()
        doc = vllm_spec_eval(tgt, str(ckpt), prompts, num_speculative_tokens=a.num_steps, max_new_tokens=a.max_new_tokens,
                             concurrency=4, run_dir=ckpt/'vllm-run', in_process=False)
        point['vllm'] = dict(acceptance=doc['vllm'], speed=doc['speed'], lossless=doc['lossless'], seconds=round(time.time() - t1, 1))
        done.write_text(json.dumps(point, indent=1))
    return point

def tokens_trained(ckpt: Path) -> int:
    recs = [json.loads(l) for l in (ckpt/'metrics.jsonl').read_text().splitlines() if l.strip()]
    return sum(r.get('tokens', 0) for r in recs if r.get('kind') == 'train')

source, MACHINE = ('online' if a.online else 'store'), machine_info()
points = []
for name, ch in variants:
    for b in budgets:
        steps = max(1, round(b / mean_len))
        d = out/f'{name}-{b}'
        cfg = replace(base, out=str(d), steps=steps, **ch)
        t0 = time.time()
        if not (d/'curve_point.json').exists():
            r = train(cfg)
            train_s = round(r.seconds, 1)
        else: train_s = json.loads((d/'curve_point.json').read_text()).get('train_s')
        p = dict(label=f'{name}', variant=ch, budget=b, steps=steps, tokens=tokens_trained(d), train_s=train_s, source=source,
                 machine=MACHINE)
        points.append(grade(name, d, p))
        print(json.dumps({k: points[-1].get(k) for k in ('label', 'budget', 'tokens', 'train_s')} |
                         {'tau': points[-1]['in_process']['all']['tau'], 'vllm': (points[-1].get('vllm') or {}).get('acceptance')}), flush=True)
for spec in a.drafter:
    label, path = spec.split('=', 1)
    d = Path(path)
    p = dict(label=label, variant='as trained', budget=None, tokens=tokens_trained(d), train_s=None)
    points.append(grade(label, d, p))
    print(json.dumps({'label': label, 'tokens': p['tokens'], 'tau': points[-1]['in_process']['all']['tau']}), flush=True)

if a.merge and a.json and Path(a.json).exists():   # points measured before on the same store, not redone here
    old = json.loads(Path(a.json).read_text())
    if (not a.online and Path(old['store']).name != Path(a.store).name) or old.get('epoch_tokens') != epoch_tokens:
        sys.exit(f"--merge: {a.json} was measured on {old['store']} ({old.get('epoch_tokens')} tokens an epoch), "
                 f"not on this {'data' if a.online else 'store'} ({epoch_tokens}); write another --json")
    here = {(p['label'], p['budget']) for p in points}
    points = [p for p in old['points'] if (p['label'], p['budget']) not in here] + points
    runs = old.get('runs') or [dict(store=old['store'], argv=old['argv'])]
    store_was = old['store']
else: runs, store_was = [], a.store or None
doc = dict(bench='learning_curve', store=store_was, data=a.data, mean_window=round(mean_len, 1), epoch_tokens=epoch_tokens,
           eval=ecfg, argv=sys.argv[1:], points=points, cpu=os.cpu_count(),
           runs=runs + [dict(store=a.store or None, online=a.online, data=a.data, argv=sys.argv[1:], machine=MACHINE)])
if a.json:
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(doc, indent=1))
print(f"{'label':>10} {'tokens':>9} {'tau':>6} " + ' '.join(f'{s[:10]:>10}' for s in points[0]['in_process'] if s != 'all') + '  vllm tau')
for p in points:
    ip = p['in_process']
    v = ((p.get('vllm') or {}).get('acceptance') or {}).get('sequential') or {}
    print(f"{p['label']:>10} {p['tokens']:>9,} {ip['all']['tau']:6.3f} " + ' '.join(f"{ip[s]['tau']:10.3f}" for s in ip if s != 'all')
          + f"  {v.get('tau', float('nan')):.3f}")
