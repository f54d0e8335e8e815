"""bench/bench_dtype.py times the same work in fp32 and bf16 and says whether `fast_dtype`'s pick is the faster one; here
at a toy size on the tests' tiny Llama (the speeds mean nothing at this size, the record's shape and its pick do)."""
import json, os, subprocess, sys
from pathlib import Path
import torch
from eagle_nb.core import fast_dtype

REPO = Path(__file__).resolve().parents[1]

def test_both_dtypes_timed_and_the_pick_recorded(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS='1', EAGLE_NB_PROGRESS='0')
    r = subprocess.run([sys.executable, str(REPO/'bench'/'bench_dtype.py'), '--target', 'tiny-llama', '--rounds', '1', '--rows', '16',
                        '--threads', '1', '--json', str(tmp_path/'d.json')], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path/'d.json').read_text())
    assert doc['fast_dtype'] == str(fast_dtype()).removeprefix('torch.') and doc['rounds'] == 1
    lin = ['target linears, 1 row', 'target linears, 4 rows', 'target linears, 8 rows']
    assert [c['case'] for c in doc['cases']] == ['drafter GEMMs (fwd+bwd)', 'target forward', *lin,
                                                 *([f'{c}, oneDNN' for c in lin] if torch.backends.mkldnn.is_available() else [])]
    for c in doc['cases']:
        assert c['fp32_ms'] > 0 and c['bf16_ms'] > 0 and c['faster'] == ('bfloat16' if c['bf16_speedup'] > 1 else 'float32'), c
    assert f"fast_dtype picks {doc['fast_dtype']}" in r.stdout and 'rows against one row' in r.stdout
