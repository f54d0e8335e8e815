"""bench/bench_linear_kernel.py measures the target's linear layers on PyTorch's products and on oneDNN's packed ones side by
side: the shapes alone, then plain and speculative decoding with each kernel, on the tests' tiny trained Llama with an
untrained drafter (τ ~ 1: every output must still be its own kernel's plain greedy, up to ties)."""
import json, os, subprocess, sys
from pathlib import Path
import pytest, torch
from eagle_nb.train import smoke_target

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO/'bench'/'bench_linear_kernel.py'

@pytest.fixture(scope='module')
def target(tmp_path_factory): return smoke_target(tmp_path_factory.mktemp('bench_kernel')/'target')

@pytest.mark.skipif(torch.cuda.is_available() or not torch.backends.mkldnn.is_available(),
                    reason='the swap is for a CPU target with oneDNN (on a CUDA host the target loads on the GPU)')
def test_both_kernels_side_by_side(target, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS='1', EAGLE_NB_PROGRESS='0')
    r = subprocess.run([sys.executable, str(BENCH), '--target', str(target), '--prompts', str(REPO/'configs'/'prompts'/'stdlib.jsonl'),
                        '--limit', '2', '--max-new-tokens', '6', '--tau', '1.5', '--json', str(tmp_path/'k.json')],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path/'k.json').read_text())
    assert set(doc['kernels']) == {'default', 'onednn'}
    for k in doc['kernels'].values():
        assert k['prompts'] == 2 and k['lossless_up_to_ties'] == 2 and k['tau'] >= 1.0 and k['plain_tokens_per_s'] > 0, k
        assert k['predicted_speedup_at_tau'] == pytest.approx(1.5 / k['round_cost'])
    assert 0 <= doc['plain_identical_across_kernels'] <= 2 and doc['shapes']
    assert {s['rows'] for s in doc['shapes']} == {1, 4, 8} and all(s['default_ms'] > 0 and s['onednn_ms'] > 0 for s in doc['shapes'])
    assert 'oneDNN against F.linear' in r.stdout
