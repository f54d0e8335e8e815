import os, sys
from pathlib import Path
os.environ.setdefault('EAGLE_NB_PROGRESS', '0')
ROOT = Path(__file__).resolve().parents[1]

def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: uses the real SmolLM2 target or takes more than a few seconds')

import pytest

@pytest.fixture
def cpu_host(monkeypatch):
    "A CPU host (no CUDA) with no thread settings of the user's; call it with the cores this process may use."
    import torch
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    for var in ('VLLM_CPU_OMP_THREADS_BIND', 'OMP_NUM_THREADS'): monkeypatch.delenv(var, raising=False)
    return lambda cpus: monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: set(cpus))

@pytest.fixture(scope='module')
def one_torch_thread():
    """Tiny models on a small shared machine: thread start-up and OpenMP contention dominate 64-wide matmuls, so one
    intra-op thread is several times faster. Use with `pytestmark = pytest.mark.usefixtures('one_torch_thread')`."""
    import torch
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---------- real engine servers shared between test files ----------
# A server start costs minutes of both cores on this machine (make test runs the engine files beside everything else), so
# the files that need the same server share one: started on first use, stopped as soon as the next test does not use it
# (tests/run_all.py orders the engine files so that its users are adjacent), restarted if a test killed it.
SERVER_IDS = [1, 2, 14, 15, 26, 27, 30]   # HF ids one vLLM server captures: the correct store and the seed's mistake


class SharedServer:
    "A lazily started server; `get()` (re)starts it when it is not running."
    def __init__(self, start): self._start, self.srv = start, None

    def get(self):
        if self.srv is not None and not self.srv.alive(): self.stop()
        if self.srv is None: self.srv = self._start()
        return self.srv

    def stop(self):
        if self.srv is not None:
            srv, self.srv = self.srv, None
            srv.stop()


_SHARED: dict[str, SharedServer] = {}


def pytest_runtest_teardown(item, nextitem):
    for name, h in _SHARED.items():
        if h.srv is not None and (nextitem is None or name not in nextitem.fixturenames): h.stop()


@pytest.fixture(scope='session')
def vllm_extract_server(tmp_path_factory):
    """Real vLLM (vllm-cpu, eagle_nb's connector) capturing HF ids SERVER_IDS: test_sglang_real_vs_vllm and test_vllm_extract
    (whose last test kills it). Use `vllm_extract_server.get()` in the fixture or test that needs the live server."""
    def start():
        from eagle_nb.vllm import start_vllm_server
        from eagle_nb.target import TARGETS
        return start_vllm_server(TARGETS['smollm2-135m'](), tmp_path_factory.mktemp('vllm-run'), name='vllm-extract',
                                 extract_layer_ids=SERVER_IDS)
    h = _SHARED.setdefault('vllm_extract_server', SharedServer(start))
    yield h
    h.stop()


@pytest.fixture(scope='session')
def sglang_cli_store(tmp_path_factory):
    """`eagle-nb extract --backend sglang` without --url, run once: it starts its own real SGLang servers (aux + final),
    stops them, and leaves the store in DIR/sglang (its logs in DIR/sglang.sglang-logs) of the 6 samples DIR/ds.
    test_sglang_real_cli checks the run; test_sglang_real_vs_vllm compares its store with real vLLM's."""
    from sglang_real_helpers import prepare_smollm2_samples
    from eagle_nb.cli import extract_main
    d = tmp_path_factory.mktemp('sglang-cli')
    data = prepare_smollm2_samples(d/'ds', n=6)
    assert extract_main(['--backend', 'sglang', '--data', str(data), '--target', 'smollm2-135m', '--out', str(d/'sglang')]) == 0
    return d
