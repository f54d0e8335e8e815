#!/usr/bin/env python
"""Decoding SGLang /generate hidden states: eagle_nb's decoder vs plain `json.loads` -> `torch.tensor`, in floats/s,
first on REAL bodies saved from the real SGLang server (sglang 0.5.23 --device cpu, SmolLM2-135M: final state 576 wide
and aux capture 1728 wide, 128/512/1024 tokens; captured once into $EAGLE_NB_HOME/bench/sglang-bodies by starting the
real servers, reused after), then on synthetic bodies of bigger models, then the client against the fake server.

eagle_nb's decoder takes the pysimdjson C-buffer path where pysimdjson is installed (a requirement), else the value
cache; "cold" clears the value cache first. Usage: python bench/bench_sglang_decode.py [--quick] [--real-only]
"""
import argparse, json, sys, time
from pathlib import Path
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT/'tests'))
import eagle_nb.sglang as sg


def body(T, W, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(T, W, generator=g) * 2).to(torch.bfloat16).float()
    meta = dict(id='b', finish_reason={'type': 'length', 'length': 1}, prompt_tokens=T, completion_tokens=1, cached_tokens=0,
                hidden_states=[x.tolist()], e2e_latency=0.1)
    return json.dumps(dict(text='', output_ids=[0], meta_info=meta), separators=(',', ':')).encode(), x


def best(f, n):
    ts = []
    for _ in range(n):
        t = time.perf_counter(); r = f(); ts.append(time.perf_counter() - t)
    return min(ts), r


def plain(b):
    return torch.tensor(json.loads(b)['meta_info']['hidden_states'][0])


def fast(b):
    return torch.from_numpy(sg.decode_generate_response(b)[1])


def bench_decode(shapes, reps):
    print(f"{'rows x width':>14} {'MB':>6} {'json.loads+torch.tensor':>24} {'eagle_nb cold':>16} {'eagle_nb warm':>16} {'ratio warm':>11} {'ratio cold':>11}")
    ratios = []
    for T, W in shapes:
        b, x = body(T, W)
        n = T * W
        tp, ref = best(lambda: plain(b), reps)
        sg._FLOAT_CACHE.clear(); sg._FLOAT_CACHE.update(sg._SPECIAL)
        t0 = time.perf_counter(); got = fast(b); tc = time.perf_counter() - t0
        tw, got2 = best(lambda: fast(b), reps)
        assert torch.equal(got, ref) and torch.equal(got2, x), 'decoders disagree'
        ratios.append(tp / tw)
        print(f"{T:>6} x {W:<6} {len(b)/1e6:6.1f} {n/tp/1e6:17.2f} Mfl/s {n/tc/1e6:10.2f} Mfl/s {n/tw/1e6:10.2f} Mfl/s "
              f"{tp/tw:10.1f}x {tp/tc:10.1f}x")
    print(f"decode speed-up (warm) vs json.loads -> torch.tensor: {min(ratios):.1f}x .. {max(ratios):.1f}x")


def bench_processes(n_bodies, shape=(512, 1728)):
    "Throughput of decode_and_validate over many bodies: in this thread vs a pool of worker processes."
    import multiprocessing, os
    from concurrent.futures import ProcessPoolExecutor
    bodies = [body(*shape, seed=i)[0] for i in range(n_bodies)]
    n = n_bodies * shape[0] * shape[1]
    sg.decode_and_validate(bodies[0], shape[0], shape[1])             # warm this process's cache
    t = time.perf_counter()
    for b in bodies: sg.decode_and_validate(b, shape[0], shape[1])
    t0 = time.perf_counter() - t
    print(f"\n{n_bodies} bodies of {shape[0]} x {shape[1]}, {os.cpu_count()} cores: in-thread {n/t0/1e6:.2f} Mfloats/s")
    for P in sorted({2, os.cpu_count() or 2}):
        with ProcessPoolExecutor(P, mp_context=multiprocessing.get_context('spawn')) as ex:
            list(ex.map(sg.decode_and_validate, bodies[:2 * P], [shape[0]] * 2 * P, [shape[1]] * 2 * P))   # spawn + warm
            t = time.perf_counter()
            list(ex.map(sg.decode_and_validate, bodies, [shape[0]] * n_bodies, [shape[1]] * n_bodies))
            tp = time.perf_counter() - t
        print(f"  {P} decode processes: {n/tp/1e6:.2f} Mfloats/s ({t0/tp:.1f}x in-thread)")


def bench_client(n_samples):
    from fake_sglang import FakeSGLang
    from eagle_nb.target import tiny_target
    torch.set_num_threads(1)
    tgt = tiny_target('llama', hidden_size=256)
    g = torch.Generator().manual_seed(0)
    items = [(f's{i}', torch.randint(0, tgt.vocab_size, (256,), generator=g).tolist()) for i in range(n_samples)]
    print(f"\nclient against the fake server: {n_samples} samples x 256 tokens, width {tgt.hidden_size}, "
          f"+20 ms emulated GPU time per request")
    for n_srv, conc in [(1, 1), (1, 8), (2, 8), (2, 16)]:
        srvs = [FakeSGLang(tgt, latency_s=0.02).start() for _ in range(n_srv)]
        try:
            c = sg.SGLangClient([s.url for s in srvs], width=tgt.hidden_size, concurrency=conc)
            t = time.perf_counter()
            out = [r for r in c.map(items)]
            dt = time.perf_counter() - t
        finally:
            for s in srvs: s.stop()
        assert all(err is None for _, _, err in out)
        rep = c.report
        print(f"  {n_srv} server(s), concurrency {conc:>2}: {n_samples/dt:7.1f} samples/s, {rep.tokens/dt:9.0f} tokens/s, "
              f"{rep.floats/dt/1e6:6.2f} Mfloats/s, client decode {rep.floats/max(rep.decode_s,1e-9)/1e6:6.1f} Mfloats/s")


def real_bodies(refresh: bool = False) -> dict:
    "name -> body bytes of real /generate responses from the real SGLang server (captured once, then cached)."
    from eagle_nb.core import home_dir
    d = home_dir()/'bench'/'sglang-bodies'
    names = [f'{role}-{T}' for role in ('final', 'aux') for T in (128, 512, 1024)]
    if refresh or not all((d/f'{n}.json').exists() for n in names):
        import urllib.request
        from eagle_nb.sglang import start_extraction_servers, generate_request
        from eagle_nb.data import TokenizedDataset
        from sglang_real_helpers import prepare_smollm2_samples
        d.mkdir(parents=True, exist_ok=True)
        ds = TokenizedDataset.open(prepare_smollm2_samples(d/'ds', n=2, max_len=1024))
        ids = max((ds[i]['input_ids'].tolist() for i in range(len(ds))), key=len)
        print(f'capturing real bodies from the real SGLang server into {d} ({len(ids)}-token sample)', flush=True)
        servers = start_extraction_servers('smollm2-135m', [2, 15, 27], d/'logs')
        try:
            for s, role in zip(servers, ('aux', 'final')):
                for T in (128, 512, 1024):
                    req = urllib.request.Request(s.url + '/generate', json.dumps(generate_request(ids[:T])).encode(),
                                                 {'Content-Type': 'application/json'})
                    (d/f'{role}-{T}.json').write_bytes(urllib.request.urlopen(req, timeout=600).read())
        finally:
            for s in servers: s.stop()
    return {n: (d/f'{n}.json').read_bytes() for n in names}


def bench_real(reps):
    try: import simdjson; path = f'pysimdjson {simdjson.__version__ if hasattr(simdjson, "__version__") else ""}'.strip()
    except ImportError: path = 'value cache (pysimdjson not installed)'
    print(f"REAL bodies from sglang 0.5.23 (SmolLM2-135M, --device cpu); eagle_nb path: {path}")
    print(f"{'body':>12} {'rows x width':>13} {'MB':>6} {'json.loads+torch.tensor':>24} {'eagle_nb':>14} {'ratio':>7}")
    ratios = []
    for name, b in real_bodies().items():
        tp, ref = best(lambda: plain(b), reps)
        tf, got = best(lambda: fast(b), reps)
        assert torch.equal(got, ref), f'{name}: decoders disagree'
        n = ref.numel(); ratios.append(tp / tf)
        print(f"{name:>12} {ref.shape[0]:>5} x {ref.shape[1]:<5} {len(b)/1e6:6.1f} {n/tp/1e6:17.2f} Mfl/s {n/tf/1e6:8.2f} Mfl/s {tp/tf:6.1f}x")
    print(f"real bodies: eagle_nb decode vs json.loads -> torch.tensor: {min(ratios):.1f}x .. {max(ratios):.1f}x "
          f"(median {sorted(ratios)[len(ratios) // 2]:.1f}x)")


if __name__ == '__main__':
    ap = argparse.ArgumentParser(); ap.add_argument('--quick', action='store_true'); ap.add_argument('--real-only', action='store_true')
    a = ap.parse_args()
    bench_real(reps=3 if a.quick else 5)
    if a.real_only: sys.exit(0)
    shapes = [(128, 576), (512, 576), (512, 1728)] if a.quick else [(128, 576), (512, 576), (512, 1728), (1024, 4096), (256, 3 * 7168)]
    bench_decode(shapes, reps=2 if a.quick else 3)
    bench_processes(8 if a.quick else 16)
    bench_client(16 if a.quick else 64)
