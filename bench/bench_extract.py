#!/usr/bin/env python
"""Extraction on SmolLM2-135M, measured side by side in one run (same samples, same batches):

1. capture overhead: `capture_hidden_states` (hooks, one forward of the base model) vs a bare forward of the same
   batches with no capture; each batch run `--reps` times alternating the order, median per batch. Target <= 1.05x.

Times are CPU seconds of this process (`time.process_time`) with `--threads 1` by default, so that ratios hold on a
machine shared with other jobs; wall-clock tokens/s are printed next to them (they include fsync waits).
2. end to end: `extract()` (preflight skipped, store writes + hashing + fsync included) vs the same bare forward.
3. the naive loop: the CausalLM with output_hidden_states=True, fixed batches padded to the longest sample
   (SpecForge-style), in dataset order.
4. bytes/token of each store layout next to SpecForge's 8H.

  .venv/bin/python bench/bench_extract.py [--samples 24] [--max-len 160] [--reps 3] [--threads 1]
"""
import argparse, json, statistics, sys, tempfile, time
from pathlib import Path
import torch

from eagle_nb.data import prepare_dataset, TokenizedDataset
from eagle_nb.extract import ExtractConfig, capture_hidden_states, decoder_parts, extract, plan_batches, padding_overhead
from eagle_nb.store import bytes_per_token, specforge_bytes_per_token
from eagle_nb.target import load_target


class Clock:
    "CPU seconds of this process and wall seconds, together."
    def __enter__(self): self.c, self.w = time.process_time(), time.perf_counter(); return self
    def __exit__(self, *e): self.cpu, self.wall = time.process_time() - self.c, time.perf_counter() - self.w


def padded(ds, idx, T=None):
    toks = [ds[i]['input_ids'] for i in idx]
    T = T or max(len(t) for t in toks)
    x = torch.zeros(len(toks), T, dtype=torch.long)
    for b, t in enumerate(toks): x[b, :len(t)] = t
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--samples', type=int, default=24)
    ap.add_argument('--max-len', type=int, default=160)
    ap.add_argument('--token-budget', type=int, default=1024)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--threads', type=int, default=1, help='torch threads (0: leave the default)')
    ap.add_argument('--json', default='', help='also write the numbers here')
    a = ap.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    t = load_target('smollm2-135m')
    print(f'{t}, {torch.get_num_threads()} threads, forward dtype {t.dtype}', flush=True)
    with tempfile.TemporaryDirectory() as d:
        prepare_dataset('sharegpt', t, Path(d)/'data', max_len=a.max_len, policy='truncate', limit=a.samples, verify=0)
        ds = TokenizedDataset.open(Path(d)/'data')
        lengths = ds.lengths
        plan = plan_batches(lengths, a.token_budget)
        tokens = sum(lengths)
        print(f'{len(ds)} ShareGPT samples, {tokens:,} tokens (max_len {a.max_len}), {len(plan)} length-bucketed batches '
              f'(budget {a.token_budget}, padding +{padding_overhead(plan, lengths):.1%})', flush=True)
        batches = [padded(ds, b) for b in plan]
        base, _, _ = decoder_parts(t.model)
        layers = t.default_aux_layers()

        @torch.no_grad()
        def bare(x): base(input_ids=x, use_cache=False)
        def hooked(x): capture_hidden_states(t, x, None, layers)
        for x in batches[-1:]: bare(x); hooked(x)                  # warm-up
        # 1. interleaved, per batch: bare / capture (order alternating)
        tb, tc = [], []                                            # per batch: median over reps, alternating order
        for j, x in enumerate(batches):
            rb, rc = [], []
            for r in range(a.reps):
                for fn, acc in ([(bare, rb), (hooked, rc)] if (j + r) % 2 == 0 else [(hooked, rc), (bare, rb)]):
                    with Clock() as c: fn(x)
                    acc.append(c.cpu)
            tb.append(statistics.median(rb)); tc.append(statistics.median(rc))
        bare_s, cap_s = sum(tb), sum(tc)
        # 2. end to end extract into a store (fresh store each rep; probe off so every batch is timed once)
        te, tw = [], []
        for r in range(a.reps):
            cfg = ExtractConfig(token_budget=a.token_budget, probe_batches=0, progress=False)
            with Clock() as c: extract(ds, t, Path(d)/f'store{r}', cfg, verbose=False)
            te.append(c.cpu); tw.append(c.wall)
        ext_s, ext_wall = min(te), min(tw)
        # 3. naive: CausalLM(output_hidden_states=True), batches in dataset order padded to the longest sample
        B = max(1, a.token_budget // max(lengths))
        T = max(lengths)
        naive = [padded(ds, list(range(i, min(i + B, len(ds)))), T) for i in range(0, len(ds), B)]
        with torch.no_grad():
            t.model(naive[-1][:1], output_hidden_states=True)
            tn = []
            for r in range(max(1, a.reps - 1)):
                with Clock() as c:
                    for x in naive:
                        out = t.model(x, output_hidden_states=True, use_cache=False)
                        hs = out.hidden_states; _ = [hs[k] for k in layers], hs[-1]
                tn.append(c.cpu)
        naive_s = min(tn)
    H, n = t.hidden_size, len(layers)
    res = dict(tokens=tokens, threads=torch.get_num_threads(), bare_tok_s=tokens / bare_s, capture_tok_s=tokens / cap_s, extract_tok_s=tokens / ext_s,
               extract_wall_tok_s=tokens / ext_wall,
               naive_tok_s=tokens / naive_s, capture_overhead=cap_s / bare_s, extract_overhead=ext_s / bare_s,
               naive_vs_extract=naive_s / ext_s)
    print(f'\nSmolLM2-135M, {tokens:,} tokens, {a.reps} reps, tokens per CPU-second ({torch.get_num_threads()} thread(s)):')
    print(f'  bare forward (base model, no capture)     {res["bare_tok_s"]:8,.0f} tokens/s')
    print(f'  capture_hidden_states (hooks)             {res["capture_tok_s"]:8,.0f} tokens/s   overhead {res["capture_overhead"]:.3f}x  (target <= 1.05x)')
    print(f'  extract() end to end (store, sha, fsync)  {res["extract_tok_s"]:8,.0f} tokens/s   overhead {res["extract_overhead"]:.3f}x   (wall clock: {res["extract_wall_tok_s"]:,.0f} tokens/s)')
    print(f'  naive output_hidden_states, pad-to-max    {res["naive_tok_s"]:8,.0f} tokens/s   extract() is {res["naive_vs_extract"]:.2f}x faster')
    sf = specforge_bytes_per_token(H)
    print(f'\nbytes/token (H={H}, {n} aux layers), SpecForge 8H = {sf:,}:')
    k = 20
    for name, kw in [('bf16 aux + final', {}), ('fp8 aux + final', dict(aux_dtype='fp8')),
                     (f'bf16 aux + top-{k}', dict(store_final=False, topk=k)), (f'fp8 aux + top-{k}', dict(aux_dtype='fp8', store_final=False, topk=k)),
                     (f'fp8 aux + final + top-{k}', dict(aux_dtype='fp8', topk=k))]:
        b = bytes_per_token(H, n, **kw); res[f'bytes {name}'] = b
        print(f'  {name:24s} {b:6,d}  {b / sf:.2f}x')
    if a.json: Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
