#!/usr/bin/env python
"""Is `core.fast_dtype`'s pick the faster one on this CPU? The same work in fp32 and in bf16, interleaved round by round:
the drafter's training GEMMs (every linear layer of the standard profile's drafter, forward and backward, at one
512-token window), the target's forward over 512 tokens (what extraction runs a window), and the target's linear layers
alone at 1, 4 and 8 rows (a decode step's products and a 3-draft verify's: what decides the verify's cost in plain steps),
and once more on oneDNN with packed weights (`specdec.OneDnnLinear`) where PyTorch has it: fp32 always, bf16 where the CPU
has it natively, as the decoder swaps them in (`specdec.onednn_applies`).

`fast_dtype` picks bf16 only where the CPU has AMX or AVX512-BF16 and fp32 elsewhere; this bench measures both sides of
that choice on the machine at hand instead of assuming it:

    python bench/bench_dtype.py [--rounds 5] [--threads 2] [--json bench/results/dtype-MACHINE.json]
"""
import argparse, json, statistics, time
import torch
from eagle_nb.core import fast_dtype, machine_info, pick_device
from eagle_nb.drafter import DrafterConfig, Eagle3Drafter

p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
p.add_argument('--rounds', type=int, default=5, help='timed rounds (after one warm-up), fp32 and bf16 alternating')
p.add_argument('--rows', type=int, default=512, help='tokens a window')
p.add_argument('--threads', type=int, default=2)
p.add_argument('--target', default='smollm2-135m', help="a target name or directory for the forward ('' skips it)")
p.add_argument('--decode-rows', default='1,4,8', help="row counts for the target's linears alone (1: a decode step, 4: a 3-draft verify)")
p.add_argument('--json', default='', help='write the results here')
a = p.parse_args()
a.decode_rows = [int(x) for x in a.decode_rows.split(',') if x]
torch.set_num_threads(a.threads); torch.manual_seed(0)
dev = pick_device()
sync = torch.cuda.synchronize if dev.type == 'cuda' else (lambda: None)

cfg = DrafterConfig(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                    rms_norm_eps=1e-5, rope_theta=100000.0, rope_scaling=None, max_position_embeddings=8192,
                    vocab_size=49152, draft_vocab_size=8192, aux_layer_ids=[2, 15, 27], target_hidden_size=576)
shapes = [(m.in_features, m.out_features) for m in Eagle3Drafter(cfg).modules() if isinstance(m, torch.nn.Linear)]
weights = {dt: [torch.randn(o, i, dtype=dt, device=dev, requires_grad=True) for i, o in shapes] for dt in (torch.float32, torch.bfloat16)}

def drafter_gemms(dt):
    "Forward and backward of every drafter linear at one window (the weights' and the input's gradients)."
    for w in weights[dt]:
        x = torch.randn(a.rows, w.shape[1], dtype=dt, device=dev, requires_grad=True)
        (x @ w.t()).float().sum().backward()

models = {}
if a.target:
    from eagle_nb.target import load_target
    models = {dt: load_target(a.target, dtype=dt, device=str(dev)).model.eval() for dt in (torch.float32, torch.bfloat16)}
    ids = torch.randint(0, models[torch.float32].config.vocab_size, (1, a.rows), generator=torch.Generator().manual_seed(0)).to(dev)

def target_forward(dt):
    "The target's forward over one window with every layer's hidden states, as extraction runs it."
    with torch.no_grad(): models[dt](input_ids=ids, output_hidden_states=True)

def target_linears(m, onednn=False):
    """Every linear layer of the target (its lm_head included) at m rows, no grad: a decode step's products at 1, a
    verify's at 4. `onednn`: the products on oneDNN, the weight packed once (`specdec.OneDnnLinear`; PyTorch's fp32
    `linear` goes to MKL): fp32 always, bf16 where the decoder would swap them in too (native bf16: `onednn_applies`)."""
    from eagle_nb.specdec import OneDnnLinear, onednn_applies
    lins = {dt: [mod for mod in models[dt].modules() if isinstance(mod, torch.nn.Linear)] for dt in models}
    packed = {dt: onednn and onednn_applies(models[dt], force=True) for dt in models}   # force: fp32 on any CPU
    fns = {dt: [OneDnnLinear(l) if packed[dt] else (lambda x, w=l.weight: torch.nn.functional.linear(x, w))
                for l in lins[dt]] for dt in lins}
    xs = {dt: {l.in_features: torch.randn(m, l.in_features, dtype=dt, device=dev) for l in lins[dt]} for dt in lins}
    def run(dt):
        with torch.no_grad():
            for l, f in zip(lins[dt], fns[dt]): f(xs[dt][l.in_features])
    return run

def lin_case(m, tag=''): return f'target linears, {m} row{"s" if m > 1 else ""}{tag}'
tags = ['', ', oneDNN'] if dev.type == 'cpu' and torch.backends.mkldnn.is_available() else ['']
cases = {'drafter GEMMs (fwd+bwd)': drafter_gemms, **({'target forward': target_forward} if models else {}),
         **({lin_case(m, t): target_linears(m, bool(t)) for t in tags for m in a.decode_rows} if models else {})}
times = {(c, dt): [] for c in cases for dt in (torch.float32, torch.bfloat16)}
for r in range(a.rounds + 1):
    for c, fn in cases.items():
        for dt in ((torch.float32, torch.bfloat16) if r % 2 else (torch.bfloat16, torch.float32)):   # ABBA
            sync(); t0 = time.perf_counter(); fn(dt); sync()
            if r: times[c, dt].append(time.perf_counter() - t0)

pick = str(fast_dtype(dev)).removeprefix('torch.')
rows = []
for c in cases:
    f32, b16 = (statistics.median(times[c, dt]) for dt in (torch.float32, torch.bfloat16))
    speed = round(f32 / b16, 3)
    rows.append(dict(case=c, fp32_ms=round(f32 * 1e3, 1), bf16_ms=round(b16 * 1e3, 1), bf16_speedup=speed,
                     faster='bfloat16' if speed > 1 else 'float32'))
mi = machine_info()
print(f"{mi['device']} (family {mi.get('cpu_family')}, model {mi.get('cpu_model')}; {', '.join(mi.get('flags', [])) or 'no listed flags'}), "
      f"{a.threads} threads, {a.rows} tokens, median of {a.rounds} rounds; fast_dtype picks {pick}")
for r in rows:
    print(f"  {r['case']:<26} fp32 {r['fp32_ms']:8.1f} ms   bf16 {r['bf16_ms']:8.1f} ms   bf16 is {r['bf16_speedup']:.2f}x fp32's speed -> "
          f"{r['faster']} faster{'' if r['faster'] == pick else '  (NOT the dtype fast_dtype picks)'}")
by_case = {r['case']: r for r in rows}
for tag in tags if models and 1 in a.decode_rows else []:
    one = by_case[lin_case(1, tag)]
    print(f"  rows against one row, the same dtype{' (on oneDNN)' if tag else ''}: " + '; '.join(
        f"{m} rows fp32 {r['fp32_ms'] / one['fp32_ms']:.2f}x, bf16 {r['bf16_ms'] / one['bf16_ms']:.2f}x"
        for m in a.decode_rows if m != 1 for r in [by_case[lin_case(m, tag)]]))
if a.json:
    with open(a.json, 'w') as f:
        json.dump(dict(machine=mi, threads=a.threads, rows_per_window=a.rows, rounds=a.rounds, fast_dtype=pick, cases=rows), f, indent=1)
