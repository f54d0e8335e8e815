#!/usr/bin/env python
"""The real training loop's speed per epoch, in one run: `eagle-nb train` over a store for 2+ epochs, tokens/s of each
epoch read from its metrics.jsonl (the same samples every epoch, so the same tokens and shapes).

From the second epoch on the teacher knows, per sample, which positions have their target argmax outside the draft
vocabulary (`train.teach(known=)`) and skips the non-draft part of the target's lm_head; the ratio of epoch 2 to epoch 1
is what that buys inside the loop (everything else in the step is the same work).

    python bench/loop_epochs.py --store STORE [--epochs 2] [--max-len 512] [--threads 2] [--json OUT]
"""
import argparse, json, os, subprocess, sys, time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
ap.add_argument('--store', required=True, help='a hidden-state store (eagle-nb extract)')
ap.add_argument('--epochs', type=int, default=2)
ap.add_argument('--max-len', type=int, default=512)
ap.add_argument('--threads', type=int, default=2)
ap.add_argument('--out', default='', help='training output directory (default: _runs/bench-loop-epochs)')
ap.add_argument('--json', default='', help='also write the result here')
a = ap.parse_args()
if a.epochs < 2: sys.exit('--epochs must be 2 or more: the ratio is epoch k against epoch 1')
root = Path(__file__).resolve().parents[1]
out = Path(a.out) if a.out else root/'_runs'/'bench-loop-epochs'
cmd = [str(Path(sys.executable).parent/'eagle-nb'), 'train', '--store', a.store, '--out', str(out), '--epochs', str(a.epochs),
       '--max-len', str(a.max_len), '--eval-fraction', '0.05', '--no-resume']
env = {**os.environ, 'EAGLE_NB_PROGRESS': '0', 'OMP_NUM_THREADS': str(a.threads)}
print('$', ' '.join(cmd), flush=True)
t0 = time.time()
r = subprocess.run(cmd, env=env, text=True, capture_output=True)
if r.returncode: sys.exit(f"eagle-nb train failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
wall = time.time() - t0
recs = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines() if l.strip()]
train = [x for x in recs if x['kind'] == 'train']
epochs = []
for e in range(a.epochs):
    rows = [x for x in train if x['epoch'] == e and not (e == 0 and x['step'] == 1)]   # step 1 compiles the loss kernel
    tok, sec = sum(x['tokens'] for x in rows), sum(x['seconds'] for x in rows)
    epochs.append(dict(epoch=e + 1, steps=len(rows), tokens=tok, seconds=round(sec, 1), tokens_per_s=round(tok / sec, 1)))
    print(f"epoch {e + 1}: {len(rows)} steps, {tok:,} tokens in {sec:.0f} s of steps: {tok / sec:.0f} tokens/s", flush=True)
res = dict(store=a.store, max_len=a.max_len, threads=a.threads, wall_s=round(wall, 1), epochs=epochs,
           epoch2_over_epoch1=round(epochs[1]['tokens_per_s'] / epochs[0]['tokens_per_s'], 3))
print(f"epoch 2 / epoch 1: {res['epoch2_over_epoch1']:.2f}x tokens/s (the same samples; wall-clock of the whole run {wall:.0f} s)")
if a.json: Path(a.json).write_text(json.dumps(res, indent=1))
