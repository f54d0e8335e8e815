#!/usr/bin/env python
"""Training throughput of eagle_nb.train at TTT 7 on SmolLM2-135M shapes, and the fraction of this machine's bf16
matmul throughput it reaches (the limit is measured in the same run).

Shapes: H 576, 9 heads / 3 KV heads (head_dim 64), MLP 1536, target vocab 49152, draft vocab 32000, 3 aux layers,
seq 1024, batch 1; loss mask all ones (every row trained: the worst case for eagle_nb, which skips untrained rows;
references compute every row regardless). A step = teacher (target lm_head on the final states, once per batch)
+ 7-step TTT forward + fused chunked lm_head loss + backward + grad clip + AdamW. Random aux/final states.

The limit: every GEMM of the step (drafter linears forward and backward, attention as causal batched matmuls,
both lm_heads) is timed alone as a bf16 torch.mm of the same shape, interleaved with the step timings so that
load from other processes hits both alike; `fraction = matmul-only time / step time`.

With `--specforge PATH` (a checkout of github.com/sgl-project/SpecForge; none of its code is copied here) SpecForge's
own step on the same sample is timed in the same rounds: its draft model (`LlamaForCausalLMEagle3`, sdpa, bf16 weights),
`OnlineEagle3Model` TTT loop, `Eagle3TrainStrategy` loss with its `TargetHead` teacher, and `BF16Optimizer` (fp32
masters, clip 0.5) at its defaults. One shim, labelled in `bench_recipe_vs_specforge.import_specforge`: its Triton loss
kernel is replaced by its own eager reference loss, compiled. Each round times eagle_nb, SpecForge and the GEMM limit
back to back; the ratio is SpecForge's total time over eagle_nb's on the same rounds (same tokens).

`--mask-from DATASET` trains each round on the next real chat window of SEQ tokens (ids and loss mask; spread evenly
over the dataset's full windows): SpecForge computes every row whatever the mask, eagle_nb only rows with loss (the
lm_head, and at TTT steps >= 1 the layer too; `--ablate-skip` times it without the latter as well).

`--epoch2` also times each round's window as a second-epoch step: the teacher's draft-membership bits of that sample
known (`train.teach(known=)`), so the non-draft part of the target's lm_head is skipped.

    python bench/bench_train.py [--steps 4] [--seq 1024] [--threads N] [--specforge PATH] [--mask-from DIR] [--no-limit] [--epoch2]

Measured (AMD EPYC, AVX-512 BF16, no AMX, 2 threads; bench/results/bench_train_vs_specforge.json): every row trained,
214 against SpecForge's 128 tokens/s (1.67x; the GEMM limit 304, SpecForge 123-166 across runs); 12 real ShareGPT
windows (eagle-nb prepare --data sharegpt --max-len 1024 --policy split --limit 1500; loss-mask share 0.41) 377 against
122 tokens/s (3.08x), of which skipping rows at steps >= 1 gives 1.11x (338 without). AMD EPYC with AVX2 only (fp32),
`--steps 8 --seq 512 --draft-vocab 8192 --no-limit --epoch2` on 8 real windows: second-epoch steps 251 against 229
tokens/s, 1.10x (bench/results/bench_train_epoch2-avx2.json).
Again on a 2-core AMD EPYC Zen 4 (AVX-512 BF16, no AMX; 2026-12-07, bench/results/bench_train_vs_specforge-zen4.json), the
same commands: every row trained 234 against SpecForge's 161 tokens/s (1.45x; rounds 1.42-1.56x), 0.73 of the GEMM limit
(309 tokens/s), so 2x SpecForge with every row trained is at or above that limit here; 12 real windows (loss-mask share
0.41) 433 against 160 tokens/s (2.72x; rounds 1.17-11.8x), skipping rows 1.10x of it (394 without).
"""
import argparse, json, math, os, statistics, sys, time
from pathlib import Path

p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
p.add_argument('--steps', type=int, default=4, help='timed steps (after 1 warm-up)')
p.add_argument('--seq', type=int, default=1024)
p.add_argument('--ttt', type=int, default=7)
p.add_argument('--draft-vocab', type=int, default=32000)
p.add_argument('--threads', type=int, default=0, help='torch threads (0 = torch default)')
p.add_argument('--mask', type=float, default=1.0, help='share of rows with loss (1.0 = all; chat data is ~0.5-0.7)')
p.add_argument('--mask-from', default='', help="a tokenized dataset (eagle-nb prepare --max-len SEQ --policy split): each round "
               "trains both sides on the next real window of SEQ tokens, its ids and loss mask (instead of --mask)")
p.add_argument("--json", action="store_true")
p.add_argument("--no-compile", action="store_true", help="eager loss kernel")
p.add_argument("--specforge", default="", help="SpecForge checkout: time its step side by side")
p.add_argument("--no-limit", action="store_true", help="skip the GEMM-limit timing")
p.add_argument("--ablate-skip", action="store_true", help="also time eagle_nb without skipping rows at TTT steps >= 1 (what that buys)")
p.add_argument("--epoch2", action="store_true", help="also time eagle_nb's step on samples seen before (2nd epoch: the teacher's "
               "draft-membership bits known, the non-draft lm_head skipped)")
a = p.parse_args()

import torch
if a.threads: torch.set_num_threads(a.threads)
os.environ.setdefault('EAGLE_NB_PROGRESS', '0')
from eagle_nb.core import fast_dtype, autocast, cpu_has_fast_bf16, pick_device
from eagle_nb.drafter import DrafterConfig, Eagle3Drafter, vocab_map
from eagle_nb.train import TargetHead, prepare_batch, TTTObjective, _auto_chunk

dev = pick_device()
H, heads, kv, hd, I, V, Vd, n_aux, T, S = 576, 9, 3, 64, 1536, 49152, a.draft_vocab, 3, a.seq, a.ttt
cfg = DrafterConfig(hidden_size=H, intermediate_size=I, num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd,
                    rms_norm_eps=1e-5, rope_theta=100000.0, rope_scaling=None, max_position_embeddings=8192,
                    vocab_size=V, draft_vocab_size=Vd, aux_layer_ids=[2, 15, 27], target_hidden_size=H)
torch.manual_seed(0)
embed = torch.randn(V, H) * 0.02
token_ids = torch.randperm(V)[:Vd].sort().values
head_w = torch.randn(V, H) * 0.05
head_w[~torch.isin(torch.arange(V), token_ids)] *= 0.3   # like real data: the target's argmax is nearly always a draft token
d2t, t2d = vocab_map(token_ids, V)
drafter = Eagle3Drafter(cfg, embed).set_vocab(d2t, t2d).to(dev)
obj = TTTObjective(drafter, S, _auto_chunk(Vd), compiled=not a.no_compile)
obj_full = TTTObjective(drafter, S, _auto_chunk(Vd), compiled=not a.no_compile, skip_rows=False)   # --ablate-skip
params = [q for q in obj.parameters() if q.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95))
dt = fast_dtype(dev)
head = TargetHead(head_w, token_ids, dev, dt)
g = torch.Generator().manual_seed(1)
sample = dict(id='bench', input_ids=torch.randint(0, V, (T,), generator=g),
              loss_mask=(torch.rand(T, generator=g) < a.mask).to(torch.uint8),
              aux=torch.randn(T, n_aux, H, generator=g).to(dt), final=torch.randn(T, H, generator=g).to(dt))
windows = [sample]
if a.mask_from:   # real chat windows: their tokens and loss masks (prompt/user turns carry no loss); states stay random
    from eagle_nb.data import open_dataset
    ds = open_dataset(a.mask_from)
    full = [i for i in range(len(ds)) if ds.lengths[i] >= T]
    if not full: sys.exit(f"--mask-from {a.mask_from}: no window of {T} tokens; prepare it with --max-len {T} --policy split")
    n_pick = min(len(full), a.steps + 1)          # evenly spread over the dataset's full windows; the last is the warm-up
    real = [ds[full[round(k * (len(full) - 1) / max(1, n_pick - 1))]] for k in range(n_pick)]
    print(f"{len(full)} windows of {T} tokens in {a.mask_from}, loss-mask share {statistics.mean(float(ds[i]['loss_mask'][:T].float().mean()) for i in full):.2f}", flush=True)
    windows = [dict(sample, id=r['id'], input_ids=r['input_ids'][:T].clone(), loss_mask=r['loss_mask'][:T].to(torch.uint8)) for r in real]
    print(f"{len(windows)} real windows of {T} tokens from {a.mask_from}: loss-mask share "
          f"{statistics.mean(float(w['loss_mask'].float().mean()) for w in windows):.2f}", flush=True)
decay = torch.tensor([0.8 ** i for i in range(S)], device=dev)

def specforge_step_fn(path):
    "SpecForge's own training step on `sample` (same shapes and weights at start), as its trainer runs it."
    import tempfile
    from transformers import AutoConfig
    from eagle_nb.drafter import export_sglang
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_recipe_vs_specforge import import_specforge
    if not (Path(path)/'specforge/algorithms/eagle3/model.py').exists():
        sys.exit(f"--specforge {path!r}: not a SpecForge checkout (specforge/algorithms/eagle3/model.py missing)")
    sf = import_specforge(path)
    tmp = tempfile.mkdtemp(prefix='bench-train-sf-')
    export_sglang(Eagle3Drafter(cfg, embed).set_vocab(d2t, t2d), tmp, dtype='bfloat16')   # its config.json is read
    scfg = AutoConfig.from_pretrained(tmp)
    torch.manual_seed(0)
    draft = sf['AutoDraftModel'].from_config(scfg, attention_backend='sdpa', torch_dtype=torch.float32)
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(embed); draft.d2t.copy_(d2t); draft.t2d.copy_(t2d)
    draft.freeze_embedding()
    model = sf['OnlineEagle3Model'](draft_model=draft.to(torch.bfloat16), length=S, attention_backend='sdpa').to(dev, torch.bfloat16)
    head = sf['TargetHead'](tmp)
    with torch.no_grad(): head.fc.weight.copy_(head_w)
    head.freeze_weights(); head = head.eval().to(dev, torch.bfloat16)
    strategy = sf['Eagle3TrainStrategy'](model, target_head=head)
    sopt = sf['BF16Optimizer'](model, lr=1e-4, max_grad_norm=0.5, warmup_ratio=0.015, lr_scheduler='cosine', total_steps=1000)
    def sf_step(sample=sample):
        tensors = dict(input_ids=sample['input_ids'][None].to(dev), loss_mask=sample['loss_mask'].long()[None].to(dev),
                       attention_mask=torch.ones(1, T, dtype=torch.long, device=dev),
                       hidden_state=sample['aux'].reshape(1, T, -1).to(dev, torch.bfloat16), target=sample['final'][None].to(dev, torch.bfloat16))
        t0 = time.perf_counter()
        res = strategy.forward_loss(sf['TrainBatch'](sample_ids=['bench'], strategy='eagle3', tensors=tensors,
                                                     metadata={'target_repr': 'hidden_state'}))
        res.loss.backward()
        sopt.step()
        if dev.type == 'cuda': torch.cuda.synchronize()
        return time.perf_counter() - t0
    return sf_step

seen = {}   # --epoch2: each window's draft-membership bits, from one untimed pass over the windows

def step(sample=sample, obj=obj, known=None):
    t0 = time.perf_counter()
    b = prepare_batch([sample], S, head, t2d.to(dev), Vd, T, dev, dt, known)
    w = (decay / b.counts.clamp_min(1)).float()
    with autocast(dev):
        loss, ce, ok = obj(b, w)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 0.5)
    opt.step(); opt.zero_grad(set_to_none=True)
    if dev.type == 'cuda': torch.cuda.synchronize()
    return time.perf_counter() - t0, int(b.rows.numel())

# ---- the GEMMs of one step: (m, k, n, count); an mm of (m,k)@(k,n) -----------------------------------------------
N = T - 1                      # drafter rows
M = None                       # trained rows (all steps), known after one step
def gemms(M):
    L = []
    fwd = lambda m, k, n, c=1: L.append((m, k, n, c))
    def lin(m, k, n, c=1, dx=True):  # forward, grad wrt input, grad wrt weight
        fwd(m, k, n, c); fwd(k, m, n, c)          # dW = x^T dy : (k,m)@(m,n)
        if dx: fwd(m, n, k, c)                    # dX = dy W^T : (m,n)@(n,k)
    lin(N, n_aux * H, H, 1, dx=False)             # fc (aux needs no grad)
    lin(N, 2 * H, heads * hd + 2 * kv * hd, S)    # q, k, v as one
    lin(N, heads * hd, H, S)                      # o
    lin(N, H, 2 * I, S)                           # gate + up
    lin(N, I, H, S)                               # down
    # attention, causal: per step QK^T and PV over ~N/2 keys per row, forward + 2x backward
    fwd(heads * N, hd, N // 2, 3 * S); fwd(heads * N, N // 2, hd, 3 * S)
    lin(M, H, Vd, 1)                              # drafter lm_head on the trained rows of all steps
    fwd(N + 1, H, V, 1)                           # teacher: target lm_head, forward only
    return L

_cache = {}
def mm_time(m, k, n):
    key = (m, k, n)
    x = torch.randn(m, k, device=dev).to(dt); y = torch.randn(k, n, device=dev).to(dt)
    torch.mm(x, y)
    reps = max(1, int(2e9 / (2 * m * k * n)))
    t0 = time.perf_counter()
    for _ in range(reps): torch.mm(x, y)
    if dev.type == 'cuda': torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps

def matmul_only(M):
    tot, fl = 0.0, 0.0
    for m, k, n, c in gemms(M):
        tot += c * mm_time(m, k, n); fl += c * 2 * m * k * n
    return tot, fl

load0 = os.getloadavg()
print(f"device {dev} ({'bf16 native' if dt == torch.bfloat16 else 'fp32'}; CPU bf16: {cpu_has_fast_bf16()}), threads {torch.get_num_threads()}, "
      f"load avg {load0[0]:.1f}", flush=True)
t_warm, M = step(windows[-1])
print(f"warm-up step {t_warm:.2f}s; trained rows {M} of {S * N}", flush=True)
sf_step = specforge_step_fn(a.specforge) if a.specforge else None
if sf_step: print(f"SpecForge warm-up step {sf_step(windows[-1]):.2f}s", flush=True)
steps, mms, sfs, nos, e2s = [], [], [], [], []
if a.ablate_skip: step(windows[-1], obj_full)
if a.epoch2:
    for w_i in windows: prepare_batch([w_i], S, head, t2d.to(dev), Vd, T, dev, dt, seen)
for i in range(a.steps):
    w_i = windows[i % len(windows)]
    t_i, M = step(w_i)
    steps.append(t_i)
    line = f"  round {i}: {w_i['loss_mask'].float().mean():.2f} mask, eagle_nb {steps[-1]:.3f}s ({T / steps[-1]:.0f} tok/s)"
    if a.ablate_skip:
        nos.append(step(w_i, obj_full)[0])
        line += f"   without row skipping {nos[-1]:.3f}s"
    if a.epoch2:
        e2s.append(step(w_i, known=seen)[0])
        line += f"   2nd epoch {e2s[-1]:.3f}s ({steps[-1] / e2s[-1]:.2f}x)"
    if sf_step:
        sfs.append(sf_step(w_i))
        line += f"   SpecForge {sfs[-1]:.3f}s ({T / sfs[-1]:.0f} tok/s, {sfs[-1] / steps[-1]:.2f}x)"
    if not a.no_limit:
        mt, flops = matmul_only(M)
        mms.append(mt)
        line += f"   matmul-only {mt:.3f}s ({T / mt:.0f} tok/s)"
    print(line, flush=True)
if a.no_limit: mms = steps   # no limit measured: every ratio below is 1, so tokens_per_s is the first round's (total_tokens_per_s: all rounds)
# other processes share this machine: pair each step with the limit measured right after it, and report the
# median over pairs (the best pair too, as the closest to an idle machine)
ratios = [m / s for s, m in zip(steps, mms)]
k = ratios.index(statistics.median_high(ratios))
step_t, mm_t = steps[k], mms[k]
res = dict(tokens_per_s=T / step_t, step_seconds=step_t, best_tokens_per_s=T / min(steps), threads=torch.get_num_threads(),
           load_avg=[load0[0], os.getloadavg()[0]], ttt=S, seq=T, draft_vocab=Vd, mask=a.mask, mask_from=a.mask_from,
           mask_share=statistics.mean(float(w['loss_mask'].float().mean()) for w in windows), device=str(dev))
if not a.no_limit:   # what was measured against: without --no-limit only
    res.update(matmul_only_seconds=mm_t, limit_tokens_per_s=T / mm_t, fraction_of_limit=mm_t / step_t, best_limit_tokens_per_s=T / min(mms),
               step_gflop=flops / 1e9, achieved_gflops=flops / step_t / 1e9, matmul_gflops=flops / mm_t / 1e9)
res.update(total_tokens_per_s=T * len(steps) / sum(steps))
if nos: res.update(no_skip_total_tokens_per_s=T * len(nos) / sum(nos), skip_speedup=sum(nos) / sum(steps))
if e2s: res.update(epoch2_total_tokens_per_s=T * len(e2s) / sum(e2s), epoch2_speedup=sum(steps) / sum(e2s))
if sf_step:
    sr = [f / s for s, f in zip(steps, sfs)]
    res.update(specforge_tokens_per_s=T / statistics.median(sfs), specforge_total_tokens_per_s=T * len(sfs) / sum(sfs),
               speedup_vs_specforge=sum(sfs) / sum(steps), speedup_vs_specforge_median_round=statistics.median(sr),
               speedup_vs_specforge_rounds=sr)
if a.no_limit:
    print(f"\ntraining: {res['total_tokens_per_s']:.0f} tokens/s over the {len(steps)} rounds, at TTT {S}, seq {T}, draft vocab {Vd}")
else:
    print(f"\ntraining: {res['tokens_per_s']:.0f} tokens/s at TTT {S}, seq {T}, draft vocab {Vd} "
          f"({res['step_gflop']:.0f} GFLOP/step, {res['achieved_gflops']:.0f} GFLOP/s); {res['total_tokens_per_s']:.0f} over all rounds")
    print(f"limit (bf16 GEMMs of the same shapes, measured now): {res['limit_tokens_per_s']:.0f} tokens/s ({res['matmul_gflops']:.0f} GFLOP/s)")
    print(f"fraction of the limit: {res['fraction_of_limit']:.2f} (median pair; pairs: {', '.join(f'{r:.2f}' for r in ratios)})")
    print(f"best observed: {res['best_tokens_per_s']:.0f} tokens/s, limit {res['best_limit_tokens_per_s']:.0f} tokens/s ({res['best_tokens_per_s'] / res['best_limit_tokens_per_s']:.2f})")
if nos: print(f"without skipping rows at steps >= 1: {res['no_skip_total_tokens_per_s']:.0f} tokens/s; skipping buys {res['skip_speedup']:.2f}x")
if e2s: print(f"2nd epoch (draft-membership bits known, non-draft lm_head skipped): {res['epoch2_total_tokens_per_s']:.0f} tokens/s; "
              f"{res['epoch2_speedup']:.2f}x the 1st epoch's step")
if sf_step:
    print(f"SpecForge, same samples, same rounds: {res['specforge_total_tokens_per_s']:.0f} tokens/s over all rounds; "
          f"eagle_nb / SpecForge {res['speedup_vs_specforge']:.2f}x (same tokens, total time; per round: {', '.join(f'{r:.2f}' for r in sr)})")
else:
    print("SpecForge side by side: --specforge PATH (a checkout of github.com/sgl-project/SpecForge)")
if a.json: print(json.dumps(res))
