"eagle_nb.sglang.sglang_cpu_threads: SGLang servers started side by side on a CPU host share its cores out, not each take them all."
import os
import pytest
import eagle_nb.sglang as S

def test_cores_shared_out(cpu_host):
    cpu_host([0, 1]);      assert S.sglang_cpu_threads(2) == [1, 1]
    cpu_host(range(16));   assert S.sglang_cpu_threads(2) == [8, 8]
    cpu_host(range(7));    assert S.sglang_cpu_threads(3) == [2, 2, 2]
    cpu_host([5]);         assert S.sglang_cpu_threads(2) == [1, 1]          # more servers than cores: one thread each

def test_left_alone(cpu_host, monkeypatch):
    cpu_host([0, 1])
    assert S.sglang_cpu_threads(1) == [None]                                 # one server: torch's default
    monkeypatch.setenv('OMP_NUM_THREADS', '2')
    assert S.sglang_cpu_threads(2) == [None, None]                           # the user's setting, which the servers inherit
    monkeypatch.delenv('OMP_NUM_THREADS')
    import torch
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    assert S.sglang_cpu_threads(2) == [None, None]                           # a GPU host

def test_extraction_servers_get_their_share(cpu_host, monkeypatch, tmp_path):
    "start_extraction_servers gives the aux and final server one thread each on 2 cores; `threads=` sets both; one server none."
    cpu_host([0, 1])
    seen = []
    class Fake:
        def __init__(self, argv, port, log_path, env=None, **kw): seen.append((argv, env))
        def start(self): return self
        def stop(self): pass
    import eagle_nb.engines as E
    monkeypatch.setattr(E, 'EngineServer', Fake)
    monkeypatch.setattr(S, 'sglang_python', lambda: 'python')
    monkeypatch.setattr(S, 'target_model_path', lambda t: tmp_path)
    monkeypatch.setattr(S.TargetInfo, 'of', staticmethod(lambda t: type('T', (), dict(num_layers=30))()))
    S.start_extraction_servers('t', [2, 15, 27], tmp_path)
    assert [env.get('OMP_NUM_THREADS') for _, env in seen] == ['1', '1']
    assert '--enable-return-aux-hidden-states' in seen[0][0] and '--enable-return-aux-hidden-states' not in seen[1][0]
    seen.clear(); S.start_extraction_servers('t', [2, 15, 27], tmp_path, threads=2)
    assert [env.get('OMP_NUM_THREADS') for _, env in seen] == ['2', '2']
    seen.clear(); S.start_extraction_servers('t', None, tmp_path)
    assert [env.get('OMP_NUM_THREADS') for _, env in seen] == [None]        # final-state store: one server, every core
    assert all(env.get('SGLANG_USE_CPU_ENGINE') == '1' for _, env in seen)
