#!/usr/bin/env python
"""Regeneration throughput with SmolLM2-135M-Instruct: batched vs one-at-a-time generation, in one run.

The same prompts (first user turns of ShareGPT conversations, at most --max-prompt tokens) are answered by
`eagle_nb.regenerate.HFBackend` twice: one prompt per `generate` call, then --batch-size prompts per call
(length-sorted, left-padded). Both runs generate --new-tokens per answer or stop at <|im_end|>; tokens/s counts
the answer tokens actually produced (padding after a finished row does not count). Prints both rates and their ratio.
Usage: bench/bench_regenerate.py [--prompts 16] [--new-tokens 48] [--batch-size 16] [--threads N] [--dtype bf16|fp32]
"""
import argparse, os, time
import torch
from eagle_nb.core import fast_dtype
from eagle_nb.target import load_target
from eagle_nb.regenerate import HFBackend, RegenerateConfig


def prompts_from_sharegpt(backend, n, max_prompt):
    "First user turns of ShareGPT conversations whose prompt fits in `max_prompt` tokens."
    from eagle_nb.data import load_conversations
    convs, _ = load_conversations('sharegpt', limit=20 * n)
    out = []
    for c in convs:
        p = [next(m for m in c.messages if m['role'] == 'user')]
        if len(backend.prompt_ids(p)) <= max_prompt: out.append(p)
        if len(out) == n: break
    return out


def timed(backend, prompts, cfg):
    t0 = time.perf_counter()
    gens = backend.generate(prompts, [0] * len(prompts), cfg)
    dt = time.perf_counter() - t0
    return gens, sum(g.completion_tokens for g in gens) / dt, dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--prompts', type=int, default=16); ap.add_argument('--new-tokens', type=int, default=48)
    ap.add_argument('--batch-size', type=int, default=16); ap.add_argument('--max-prompt', type=int, default=160)
    ap.add_argument('--threads', type=int, default=None, help='torch threads (default: torch decides; 1 when the load average exceeds the CPU count)')
    ap.add_argument('--dtype', choices=['bf16', 'fp32'], default=None, help='default: fast_dtype (bf16 where the CPU runs it natively)')
    a = ap.parse_args()
    busy = os.getloadavg()[0] > (os.cpu_count() or 1)
    if a.threads or busy:  # on a CPU busier than its core count, OpenMP threads spin-wait on each other: one is faster
        torch.set_num_threads(a.threads or 1)
    dtype = {'bf16': torch.bfloat16, 'fp32': torch.float32, None: None}[a.dtype]
    t0 = time.time()
    target = load_target('smollm2-135m', dtype=dtype)
    backend = HFBackend(target)
    prompts = prompts_from_sharegpt(backend, a.prompts, a.max_prompt)
    lens = sorted(len(backend.prompt_ids(p)) for p in prompts)
    print(f"SmolLM2-135M-Instruct {str(target.dtype).replace('torch.', '')} on {target.device} (fast_dtype: {fast_dtype(target.device)}), "
          f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; loaded in {time.time() - t0:.1f}s")
    print(f"{len(prompts)} ShareGPT prompts of {lens[0]}-{lens[-1]} tokens (median {lens[len(lens) // 2]}), {a.new_tokens} new tokens each, greedy")
    cfg = RegenerateConfig(max_new_tokens=a.new_tokens)
    backend.generate(prompts[:2], [0, 0], RegenerateConfig(max_new_tokens=2, batch_size=2))  # warm-up
    single, single_tps, single_s = timed(backend, prompts, RegenerateConfig(max_new_tokens=a.new_tokens, batch_size=1))
    batched, batched_tps, batched_s = timed(backend, prompts, RegenerateConfig(max_new_tokens=a.new_tokens, batch_size=a.batch_size))
    same = sum(x.text == y.text for x, y in zip(single, batched))
    print(f"one at a time : {single_tps:7.1f} tokens/s  ({sum(g.completion_tokens for g in single)} tokens in {single_s:.1f}s)")
    print(f"batch of {a.batch_size:<4} : {batched_tps:7.1f} tokens/s  ({sum(g.completion_tokens for g in batched)} tokens in {batched_s:.1f}s)")
    print(f"ratio batched/single: {batched_tps / single_tps:.2f}x; identical answers {same}/{len(prompts)}"
          f"{' (bf16: batch shape changes rounding)' if target.dtype == torch.bfloat16 and same < len(prompts) else ''}")


if __name__ == '__main__':
    main()
