"eagle_nb.vllm.vllm_cpu_binds: vLLM servers started side by side on a CPU host get cores of their own."
import os
import pytest
import eagle_nb.vllm as V

def test_split_into_runs(cpu_host):
    cpu_host([0, 1]);           assert V.vllm_cpu_binds(2) == ['0', '1']
    cpu_host(range(16));        assert V.vllm_cpu_binds(2) == ['0-7', '8-15']
    cpu_host(range(7));         assert V.vllm_cpu_binds(3) == ['0-1', '2-3', '4-6']      # the last run takes the rest
    cpu_host([0, 2, 4, 6]);     assert V.vllm_cpu_binds(2) == ['0,2', '4,6']             # the cores this process may use
    cpu_host([3]);              assert V.vllm_cpu_binds(2) == ['3', '3']                 # more servers than cores

def test_left_to_vllm(cpu_host, monkeypatch):
    cpu_host([0, 1])
    assert V.vllm_cpu_binds(1) == [None]                                                # one server: vLLM's own choice
    monkeypatch.setenv('VLLM_CPU_OMP_THREADS_BIND', '0-1')
    assert V.vllm_cpu_binds(2) == [None, None]                                          # the user's setting stands
    monkeypatch.delenv('VLLM_CPU_OMP_THREADS_BIND')
    import torch
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    assert V.vllm_cpu_binds(2) == [None, None]                                          # a GPU host: not vLLM's CPU backend

def test_start_passes_the_cores(monkeypatch, tmp_path):
    "`cpus` reaches the server's environment as VLLM_CPU_OMP_THREADS_BIND; an `env` of the caller's own wins."
    seen = []
    class Fake:
        def __init__(self, argv, port, log, env=None, **kw): seen.append(env)
        def start(self): return self
    import eagle_nb.engines as E
    monkeypatch.setattr(E, 'EngineServer', Fake)
    monkeypatch.setattr(E, 'engine_python', lambda name: 'python')
    V.start_vllm_server(tmp_path, tmp_path, cpus='1')
    V.start_vllm_server(tmp_path, tmp_path, cpus='1', env={'VLLM_CPU_OMP_THREADS_BIND': '0'})
    V.start_vllm_server(tmp_path, tmp_path)
    assert seen[0]['VLLM_CPU_OMP_THREADS_BIND'] == '1' and seen[1]['VLLM_CPU_OMP_THREADS_BIND'] == '0'
    assert 'VLLM_CPU_OMP_THREADS_BIND' not in seen[2]
