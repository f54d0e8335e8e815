#!/usr/bin/env python
"""forward_ttt throughput on SmolLM2-135M shapes (H 576, 9/3 heads of 64, MLP 1536, V 49152, draft vocab 32K), TTT 7.

Prints tokens/s of the drafter forward, and of forward + backward with the per-step soft cross-entropy a trainer
computes (lm_head included: it is most of the FLOPs), for our fused one-SDPA TTT attention and for the naive
explicit-mask attention over [T*(i+1)] keys, side by side, and their ratio. Random weights: speed does not depend
on them. On a shared machine run it with OMP_NUM_THREADS=1: with 2 threads on oversubscribed cores, OpenMP barriers make
every small op ~10x slower; tokens per CPU-second is the number that survives contention.
Usage: bench/bench_drafter_ttt.py [--seq 1024] [--steps 7] [--reps 3] [--device cpu|cuda]
"""
import argparse, math, time
import torch
import torch.nn.functional as F
import eagle_nb.drafter as dr
from eagle_nb.core import pick_device, autocast, fast_dtype


def naive_ttt_attention(q, k0, v0, diag_k, diag_v, key_mask=None):
    "Reference: one SDPA over [step-0 keys, diagonal keys of every step] with an explicit (T, T*(n+1)) mask."
    B, h, T, d = q.shape
    n = len(diag_k)
    K, V = torch.cat([k0] + diag_k, 2), torch.cat([v0] + diag_v, 2)
    eye = torch.eye(T, dtype=torch.bool, device=q.device)
    mask = torch.cat([torch.ones(T, T, dtype=torch.bool, device=q.device).tril()] + [eye] * n, dim=1)
    return F.scaled_dot_product_attention(q, K, V, attn_mask=mask, scale=1 / math.sqrt(d), enable_gqa=h != k0.shape[1])


def run(drafter, aux, ids, steps, reps, backward, device):
    "(tokens per wall second, tokens per CPU second of this process); best of `reps` after a warm-up."
    times, cpu = [], []
    for r in range(reps + 1):
        if device.type == 'cuda': torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        with autocast(device), torch.set_grad_enabled(backward):
            hs = drafter.forward_ttt(aux, ids, steps=steps)
            if backward:
                loss = 0.0
                for i, h in enumerate(hs):
                    logits = drafter.lm_head(h).float()                      # (B, T, draft_V)
                    target = torch.softmax(logits.detach() * 0.5, -1)         # stand-in soft target
                    loss = loss + 0.8 ** i * -(target * logits.log_softmax(-1)).sum(-1).mean()
        if backward:
            loss.backward(); drafter.zero_grad(set_to_none=True)
        if device.type == 'cuda': torch.cuda.synchronize()
        if r: times.append(time.perf_counter() - t0); cpu.append(time.process_time() - c0)   # first run is warm-up
    return ids.numel() / min(times), ids.numel() / min(cpu)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--seq', type=int, default=1024); ap.add_argument('--steps', type=int, default=7)
    ap.add_argument('--reps', type=int, default=2); ap.add_argument('--device', default=None)
    a = ap.parse_args()
    dev = pick_device(a.device)
    torch.manual_seed(0)
    c = dr.DrafterConfig(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                         rms_norm_eps=1e-5, rope_theta=100000.0, rope_scaling=None, max_position_embeddings=8192,
                         vocab_size=49152, draft_vocab_size=32000, aux_layer_ids=[2, 15, 27], target_hidden_size=576)
    drafter = dr.Eagle3Drafter(c, torch.randn(49152, 576) * 0.02).to(dev)
    aux = torch.randn(1, a.seq, 3 * 576, device=dev); ids = torch.randint(0, 49152, (1, a.seq), device=dev)
    print(f"device {dev}, compute dtype {fast_dtype(dev)}, seq {a.seq}, TTT {a.steps}, threads {torch.get_num_threads()}")
    fused_attn = dr.ttt_attention
    for backward in (False, True):
        res = {}
        for name, fn in (('fused (ours)', fused_attn), ('naive mask', naive_ttt_attention)):
            dr.ttt_attention = fn
            res[name] = run(drafter, aux, ids, a.steps, a.reps, backward, dev)
        dr.ttt_attention = fused_attn
        what = 'forward+backward+loss' if backward else 'forward only'
        (fw, fc), (nw, nc) = res['fused (ours)'], res['naive mask']
        print(f"{what:>22}: fused {fw:7.0f} tok/s ({fc:7.0f} tok/CPU-s) | naive mask {nw:7.0f} tok/s ({nc:7.0f} tok/CPU-s) | "
              f"ratio {fc / nc:.2f}x (CPU time)")


if __name__ == '__main__':
    main()
