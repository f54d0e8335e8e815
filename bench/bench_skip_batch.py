#!/usr/bin/env python
"""What skipping rows at TTT steps >= 1 buys with several windows a step: a training step (teacher, TTT forward, loss,
backward) with `TTTObjective(skip_rows=True)` against `skip_rows=False`, on B real chat windows at once.

With B > 1 a position is computed in every window when one of them needs it (the union of the windows' rows), so the
share of positions kept grows with B and the saving shrinks. SmolLM2-135M shapes (H 576, 3 aux layers, target vocab
49152), random states and teacher head, real token ids and loss masks from a prepared dataset (`eagle-nb prepare
--max-len SEQ --policy split`), windows of SEQ tokens taken B at a time in dataset order. The two objectives alternate
within each round on the same batch, so load from other processes hits both alike.

    python bench/bench_skip_batch.py --data DIR [--seq 512] [--batches 1,2,4] [--rounds 6] [--threads 2] [--json FILE]
"""
import argparse, json, os, statistics, sys, time

p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
p.add_argument('--data', required=True, help='a prepared dataset (its loss masks and token ids)')
p.add_argument('--seq', type=int, default=512, help='tokens per window (windows shorter than this are not used)')
p.add_argument('--batches', default='1,2,4', help='windows per step, comma separated')
p.add_argument('--rounds', type=int, default=6, help='timed rounds per batch size (after one warm-up)')
p.add_argument('--ttt', type=int, default=7)
p.add_argument('--draft-vocab', type=int, default=8192)
p.add_argument('--threads', type=int, default=0, help='torch threads (0 = torch default)')
p.add_argument('--json', default='', help='also write the results here')
a = p.parse_args()

import torch
if a.threads: torch.set_num_threads(a.threads)
os.environ.setdefault('EAGLE_NB_PROGRESS', '0')
from eagle_nb.core import fast_dtype, autocast, pick_device, machine_info
from eagle_nb.data import open_dataset
from eagle_nb.drafter import DrafterConfig, Eagle3Drafter, vocab_map
from eagle_nb.train import TargetHead, prepare_batch, TTTObjective, _auto_chunk

dev, dt = pick_device(), fast_dtype()
H, V, Vd, T, S = 576, 49152, a.draft_vocab, a.seq, a.ttt
cfg = DrafterConfig(hidden_size=H, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                    rms_norm_eps=1e-5, rope_theta=100000.0, rope_scaling=None, max_position_embeddings=8192,
                    vocab_size=V, draft_vocab_size=Vd, aux_layer_ids=[2, 15, 27], target_hidden_size=H)
torch.manual_seed(0)
token_ids = torch.randperm(V)[:Vd].sort().values
head_w = torch.randn(V, H) * 0.05
d2t, t2d = vocab_map(token_ids, V)
drafter = Eagle3Drafter(cfg, torch.randn(V, H) * 0.02).set_vocab(d2t, t2d).to(dev)
objs = {skip: TTTObjective(drafter, S, _auto_chunk(Vd), skip_rows=skip) for skip in (True, False)}
params = [q for q in drafter.parameters() if q.requires_grad]
head = TargetHead(head_w, token_ids, dev, dt)
decay = torch.tensor([0.8 ** i for i in range(S)], device=dev)

ds = open_dataset(a.data)
full = [i for i in range(len(ds)) if ds.lengths[i] >= T]
sizes = [int(x) for x in a.batches.split(',')]
need = max(sizes) * (a.rounds + 1)
if len(full) < need: sys.exit(f"--data {a.data}: {len(full)} windows of {T} tokens, {need} needed")
g = torch.Generator().manual_seed(1)
def window(i):
    r = ds[full[i]]
    return dict(id=str(r['id']), input_ids=r['input_ids'][:T].clone(), loss_mask=r['loss_mask'][:T].to(torch.uint8),
                aux=torch.randn(T, 3, H, generator=g).to(dt), final=torch.randn(T, H, generator=g).to(dt))
windows = [window(i) for i in range(need)]

def step(samples, skip):
    t0 = time.perf_counter()
    b = prepare_batch(samples, S, head, t2d.to(dev), Vd, T, dev, dt)
    with autocast(dev):
        loss, _, _ = objs[skip](b, (decay / b.counts.clamp_min(1)).float())
    loss.backward()
    for q in params: q.grad = None
    if dev.type == 'cuda': torch.cuda.synchronize()
    return time.perf_counter() - t0, b

def kept_share(b, B):
    "The share of positions computed at steps >= 1 (the union over the batch)."
    keep = torch.zeros(S * B * (T - 1), dtype=torch.bool).index_fill_(0, b.rows.cpu(), True).view(S, B, T - 1).any(1)
    need_ = keep.flip(0).int().cumsum(0).gt(0).flip(0)
    return float(need_[1:].float().mean())

print(f"device {dev} ({dt}), threads {torch.get_num_threads()}, {len(full)} windows of {T} tokens in {a.data}", flush=True)
rows = []
for B in sizes:
    batch = lambda k: windows[k * B:(k + 1) * B]
    step(batch(a.rounds), True); step(batch(a.rounds), False)          # warm-up (its shapes' kernels)
    on, off, shares = [], [], []
    for k in range(a.rounds):
        t1, b = step(batch(k), True); t2, _ = step(batch(k), False)
        on.append(t1); off.append(t2); shares.append(kept_share(b, B))
    r = dict(batch=B, tokens_per_step=B * T, skip_s=statistics.median(on), full_s=statistics.median(off),
             kept_share=round(statistics.mean(shares), 3), rounds=[round(y / x, 3) for x, y in zip(on, off)])
    r['speedup'] = round(sum(off) / sum(on), 3)
    rows.append(r)
    print(f"B={B}: positions kept at steps >= 1 {r['kept_share']:.2f}; step {r['skip_s']:.2f}s with skipping, "
          f"{r['full_s']:.2f}s without: {r['speedup']:.2f}x (rounds {r['rounds']})", flush=True)
if a.json:
    with open(a.json, 'w') as f:
        json.dump(dict(machine=machine_info(), argv=sys.argv[1:], threads=torch.get_num_threads(), seq=T, ttt=S,
                       draft_vocab=Vd, rows=rows), f, indent=1)
