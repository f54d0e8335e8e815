"`bench/bench_vllm_serving.py` without a server: its variants, a bad one refused before minutes of start-up (the prefill/decode split it reads, `vllm.phase_times`, is tested in 01d_vllm)."
import importlib.util
import pytest
from train_helpers import ROOT


def _bench():
    spec = importlib.util.spec_from_file_location('bench_vllm_serving', ROOT/'bench'/'bench_vllm_serving.py')
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m


def test_variants():
    b = _bench()
    assert b.settings('default', '') == dict(eager=False, env={}, log=False)      # vLLM as a user starts it
    assert b.settings('compile', '') == dict(eager=False, env={}) and b.settings('eager', '')['eager']
    with pytest.raises(SystemExit, match="unknown variant 'fast'"): b.settings('fast', '')
    with pytest.raises(SystemExit, match='needs --preload'): b.settings('preload', '')
