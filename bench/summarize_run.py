#!/usr/bin/env python
"""One small JSON of a finished `eagle-nb demo` run (the run folder itself is not committed): its estimate against the
measured stage times, training tokens/s and tokens, held-out accuracy, and the eval's τ / α_k / speed-up / break-even
per prompt set.

    python bench/summarize_run.py _runs/standard-YYYYmmdd-HHMMSS bench/results/standard-YYYYmmdd.json [WALL_S]

WALL_S: the whole `eagle-nb demo` command's wall-clock seconds as timed outside it (the estimate included; run.json's
`seconds` counts the stages only).
"""
import json, os, statistics, sys
from pathlib import Path
from eagle_nb.core import machine_info
from compare_evals import output_counts   # bench/ is this script's folder, first on sys.path

run, out = Path(sys.argv[1]), Path(sys.argv[2])
rd = lambda p: json.loads(p.read_text())
r = rd(run/'run.json')
doc = dict(run=run.name, profile=r['profile'], seconds=r['seconds'], cpu=os.cpu_count(), machine=machine_info(),
           stages={k: v['seconds'] for k, v in r['stages'].items()})
if len(sys.argv) > 3: doc['wall_s'] = float(sys.argv[3])
if (run/'estimate.json').exists():
    e = rd(run/'estimate.json')
    doc['estimate'] = dict(total_s=e['total_s'], stages={s['stage']: s['seconds'] for s in e['stages']}, rates=e['rates'])
    if 'fit_limit' in e: doc['estimate']['fit_limit'] = e['fit_limit']   # a `limit: auto` profile: the limit chosen and each try
recs = [json.loads(l) for l in (run/'drafter'/'metrics.jsonl').read_text().splitlines() if l.strip()]
tr = [x for x in recs if x.get('kind') == 'train']
tps = [x['tokens_per_s'] for x in tr][len(tr) // 10:]
tc = rd(run/'drafter'/'train_config.json') if (run/'drafter'/'train_config.json').exists() else {}
doc['recipe'] = {k: tc.get(k) for k in ('lr', 'init_lm_head', 'batch_tokens', 'batch_samples', 'max_len', 'ttt_steps', 'ttt_align', 'epochs', 'warmup') if k in tc}
doc['train'] = dict(steps=len(tr), tokens=sum(x['tokens'] for x in tr), tokens_per_s_median=statistics.median(tps),
                    seconds=sum(x['seconds'] for x in tr), final_loss=tr[-1]['loss'],
                    loss_curve=[(x['step'], round(x['loss'], 4)) for x in tr[::max(1, len(tr) // 40)]])
if (run/'drafter'/'eval.json').exists():
    ev = rd(run/'drafter'/'eval.json'); doc['heldout_windows'] = dict(acc=ev.get('acc'), tau_sim=ev.get('tau_sim'))
ex = r['stages'].get('extract', {}).get('metrics', {})
doc['extract'] = {k: ex.get(k) for k in ('tokens', 'seconds', 'tokens_per_s', 'bytes_per_token', 'samples') if k in ex}
ev = rd(run/'eval'/'eval.json')
doc['eval'] = dict(config={k: ev['config'].get(k) for k in ('prompts', 'limit', 'max_new_tokens', 'num_steps')},
                   metrics=ev['metrics'], speed=ev['speed'], break_even=ev['break_even'], threads=ev.get('threads'),
                   linear_kernel=ev.get('linear_kernel'))   # the target's linear products in the eval: 'onednn' or 'default'
doc['eval']['outputs'] = dict(output_counts(ev), config=dict(int8=ev['config'].get('int8'), exact=ev['config'].get('exact')))
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps(doc, indent=1))
print(f"{out}: {doc['profile']} {doc['seconds']:.0f} s, train {doc['train']['tokens']:,} tokens at {doc['train']['tokens_per_s_median']:.0f} tok/s")
