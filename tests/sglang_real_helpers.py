"""Shared pieces of the real-SGLang tests (tests/test_sglang_real*.py): a few short SmolLM2 samples and HF states.

Everything here runs the REAL engine: sglang 0.5.23 from its own venv (`eagle_nb.engines.engine_python('sglang')`, built
when missing), `python -m sglang.launch_server --device cpu` on 127.0.0.1. Faults a real server cannot be made to
show (5xx, timeouts, torn bodies) stay with tests/fake_sglang.py (test_sglang_client.py, test_sglang_extract.py)."""
from pathlib import Path
import torch

N_SAMPLES = 4          # few, short: every real test stays well under a minute once its servers are up
MAX_LEN = 96


def prepare_smollm2_samples(out: Path, n: int = N_SAMPLES, max_len: int = MAX_LEN) -> Path:
    "A tokenized SmolLM2 dataset of `n` ShareGPT samples cut to `max_len` tokens (eagle-nb prepare)."
    from eagle_nb.data import prepare_main
    if not (Path(out)/'manifest.json').exists():
        assert prepare_main(['--data', 'sharegpt', '--target', 'smollm2-135m', '--max-len', str(max_len), '--policy', 'truncate',
                             '--limit', str(n), '--draft-vocab', '256', '--holdout', '0', '--out', str(out)]) == 0
    return Path(out)


def hf_states(input_ids, layer_ids):
    "HF `hidden_states[k]` of SmolLM2 for one sample, float32 (T, len(layer_ids), H)."
    from eagle_nb.target import load_target
    t = load_target('smollm2-135m')
    with torch.no_grad():
        hs = t.model(torch.as_tensor(input_ids)[None], output_hidden_states=True).hidden_states
    return torch.stack([hs[k][0].float() for k in layer_ids], 1)


def rel_err(a, b) -> float:
    a, b = torch.as_tensor(a).float(), torch.as_tensor(b).float()
    return float((a - b).norm() / b.norm())
