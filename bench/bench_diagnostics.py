"""Diagnosis runtime on SmolLM2: one all-layer extraction of N ShareGPT samples (a few hundred tokens each), then
`compare` of the reference against a vLLM-convention and an SGLang-convention view of the same forward pass.

    python bench/bench_diagnostics.py [--samples 100] [--min-tokens 128] [--max-tokens 384] [--threads 0]

Prints extraction throughput, the seconds of each diagnosis, samples/s and tokens/s, and the verdicts; then the
detection table (emulated cases x verdict kinds) on `--detect` SmolLM2 samples.
"""
import argparse, os, time, torch
from eagle_nb.target import load_target
from eagle_nb.diagnostics import Extraction, capture_states, compare, default_taps, demo_samples
from eagle_nb.emulators import detection_table, detection_cases

ap = argparse.ArgumentParser()
ap.add_argument('--samples', type=int, default=100)
ap.add_argument('--min-tokens', type=int, default=128)
ap.add_argument('--max-tokens', type=int, default=384)
ap.add_argument('--batch-size', type=int, default=8)
ap.add_argument('--threads', type=int, default=0, help='torch threads (0: leave the default)')
ap.add_argument('--detect', type=int, default=8, help='also print the detection table on this many SmolLM2 samples (0: skip)')
a = ap.parse_args()
if a.threads: torch.set_num_threads(a.threads)
os.environ.setdefault('EAGLE_NB_PROGRESS', '0')

t = load_target('smollm2-135m')
L, taps = t.num_layers, default_taps(t.num_layers)
samples = demo_samples(t, a.samples, a.min_tokens, a.max_tokens, seed=0, source='sharegpt')
n_tok = sum(map(len, samples.values()))
print(f"SmolLM2-135M ({t.dtype}), {len(samples)} ShareGPT samples, {n_tok} tokens "
      f"({min(map(len, samples.values()))}..{max(map(len, samples.values()))}), torch threads {torch.get_num_threads()}, "
      f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)

# One forward pass: HF ids 0..L-1 and the pre-norm final; the post-norm state is the model's own norm of it.
t0 = time.time()
ext = capture_states(t, samples, list(range(L)), final='pre', batch_size=a.batch_size)
norm = t.model.model.norm
with torch.no_grad():
    for s in ext.samples.values():
        post = norm(s['final'].to(t.dtype)).float()
        s['layers'] = {k: v.bfloat16() for k, v in s['layers'].items()}   # stores hold bf16
        s['pre'], s['post'] = s['final'].bfloat16(), post.bfloat16()
dt_x = time.time() - t0
print(f"extraction (all {L + 1} layers): {dt_x:.1f}s, {n_tok / dt_x:.0f} tokens/s", flush=True)

def view(name, held, labels, convention, final):
    "The samples as an engine convention hands them out: layers `held` labelled `labels`, and that final state."
    out = {sid: dict(input_ids=s['input_ids'], layers={lab: (s['post'] if h == L else s['layers'][h]) for lab, h in zip(labels, held)},
                     final=s[final]) for sid, s in ext.samples.items()}
    return Extraction(out, list(labels), convention, L, dict(name=name, engine=name.split('-')[0], compute_dtype=str(t.dtype)[6:], storage_dtype='bfloat16', final_storage_dtype='bfloat16'))

ref = view('reference', list(range(L + 1)), list(range(L + 1)), 'hf', 'post')
spec = [i - 1 for i in taps]
cases = {'vllm (SpecForge config)': view('vllm-specforge', spec, spec, 'specforge', 'pre'),
         'sglang (HF ids in config)': view('sglang-hf', [i + 1 for i in taps], taps, 'hf', 'post'),
         'correct taps': view('hf-taps', taps, taps, 'hf', 'post')}
for name, b in cases.items():
    t0 = time.time()
    c = compare(ref, b)
    dt = time.time() - t0
    print(f"diagnose {name:26s}: {dt:6.1f}s  {len(samples) / dt:6.1f} samples/s  {n_tok / dt:7.0f} tokens/s  -> {', '.join(c.kinds)}", flush=True)
print(f"diagnosis / extraction time: {dt / dt_x:.2f}")

if a.detect:
    import pandas as pd
    s2 = demo_samples(t, a.detect, 64, 256, seed=7, source='sharegpt')
    t0 = time.time()
    tab, _ = detection_table(t, s2, reference=capture_states(t, s2, batch_size=3), cases=detection_cases(t, s2, composite=True))
    with pd.option_context('display.width', 250, 'display.max_columns', 30):
        print(f"\ndetection table, SmolLM2, {len(s2)} ShareGPT samples ({sum(map(len, s2.values()))} tokens), {time.time() - t0:.0f}s:")
        print(tab.drop(columns=['seconds']).rename(columns=lambda c: c.replace('_', ' ')).to_string())
    print(f"{int(tab['ok'].sum())}/{len(tab)} cases gave exactly the expected verdicts")
