#!/usr/bin/env python
"""SGLang extraction on a CPU host: the aux and final servers each with torch's default threads (every core) against
each with its share of the cores (`sglang_cpu_threads`, what `start_extraction_servers` now does), in alternating
rounds of one run on the same SmolLM2 samples. Each round starts both servers (timed apart), extracts the samples into a
new store through `SGLangServerSource`, and stops them; the ratio is over the summed extraction time of the rounds.

SGLang 0.5.23 binds its CPU threads only on AMX or arm64 hosts; elsewhere each scheduler sizes its OpenMP pool to every
core, so the two servers of an aux extraction, which compute each sample at the same time, oversubscribe the machine.

    python bench/bench_sglang_threads.py [--rounds 2] [--samples 16] [--max-len 512] [--json]

Measured on a 2-core AMD EPYC Zen 4 (family 25 model 17; AVX512-BF16, no AMX), 16 ShareGPT samples of at most 512 tokens
(7,802 tokens), two rounds: this file, torch's default 169.2 and 156.0 tokens/s, one thread each 235.3 and 242.8: 1.47x
(bench/results/sglang_threads-zen4.json). Before it, an ad-hoc script of the same steps with three variants: torch's
default 167.6 and 143.5, one thread each 264.2 and 262.0, one thread each and each server pinned to its own core
(taskset) 256.7 and 244.5, so the threads matter and pinning adds nothing.
"""
import argparse, json, shutil, sys, tempfile, time
import concurrent.futures as cf
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT/'tests'))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--rounds', type=int, default=2); ap.add_argument('--samples', type=int, default=16)
    ap.add_argument('--max-len', type=int, default=512); ap.add_argument('--json', action='store_true')
    a = ap.parse_args()
    from sglang_real_helpers import prepare_smollm2_samples
    from eagle_nb.extract import WriteConfig, write_store
    from eagle_nb.sglang import SGLangServerSource, sglang_server, sglang_cpu_threads
    aux = [2, 15, 27]
    split = sglang_cpu_threads(2)
    if split[0] is None: sys.exit("sglang_cpu_threads(2) leaves the threads alone on this host (one core, a GPU, or OMP_NUM_THREADS set)")
    variants = {'torch default (every core each)': [None, None], f'shared out ({split[0]} thread{"s" * (split[0] > 1)} each)': split}
    work = Path(tempfile.mkdtemp(prefix='bench-sglang-threads-'))
    runs = {v: [] for v in variants}
    try:
        data = prepare_smollm2_samples(work/'ds', n=a.samples, max_len=a.max_len)
        for r in range(a.rounds):
            for j, (v, threads) in enumerate(variants.items()):
                servers = [sglang_server('smollm2-135m', work/f'logs-round{r}-variant{j}'/f'sglang-{role}.log', ids, threads=threads[k])
                           for k, (role, ids) in enumerate((('aux', aux), ('final', None)))]
                t0 = time.time()
                with cf.ThreadPoolExecutor(2) as ex: list(ex.map(lambda s: s.start(), servers))
                start_s = time.time() - t0
                src = SGLangServerSource('smollm2-135m', [servers[0].url], layer_ids=aux, final_urls=[servers[1].url], servers=servers)
                try: w = write_store(src, data, work/f'store-round{r}-variant{j}', WriteConfig(progress=False, verbose=False))
                finally: src.close()
                if w.failed: sys.exit(f"{v}: {len(w.failed)} samples failed")
                runs[v].append(dict(start_s=round(start_s, 1), tokens=w.tokens, seconds=round(w.seconds, 2), tokens_per_s=round(w.tokens / w.seconds, 1)))
                print(f"round {r + 1} {v:34s} start {start_s:5.1f} s  {w.tokens:,} tokens in {w.seconds:6.1f} s  {w.tokens / w.seconds:6.1f} tokens/s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    d, s = runs                                        # the default, then the shared-out variant
    tps = {v: sum(x['tokens'] for x in rs) / sum(x['seconds'] for x in rs) for v, rs in runs.items()}
    print(f"\n{s}: {tps[s]:.1f} tokens/s; {d}: {tps[d]:.1f} tokens/s; ratio {tps[s] / tps[d]:.2f}x")
    if a.json:
        import os
        from eagle_nb.core import machine_info
        print(json.dumps(dict(machine=machine_info(), cores=len(os.sched_getaffinity(0)), samples=a.samples,
                              max_len=a.max_len, rounds=runs, tokens_per_s=tps, ratio=tps[s] / tps[d]), indent=1))


if __name__ == '__main__':
    main()
