import os, sys
from pathlib import Path
os.environ.setdefault('EAGLE_NB_PROGRESS', '0')
ROOT = Path(__file__).resolve().parents[1]

def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: uses the real SmolLM2 target or takes more than a few seconds')

import pytest

@pytest.fixture(scope='module')
def one_torch_thread():
    """Tiny models on a small shared machine: thread start-up and OpenMP contention dominate 64-wide matmuls, so one
    intra-op thread is several times faster. Use with `pytestmark = pytest.mark.usefixtures('one_torch_thread')`."""
    import torch
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
