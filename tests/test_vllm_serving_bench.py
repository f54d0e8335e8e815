"`bench/bench_vllm_serving.py` without a server: its variants, a bad one refused before minutes of start-up (the prefill/decode split it reads, `vllm.phase_times`, is tested in 01d_vllm)."
import sys
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]/'bench'))
from bench_vllm_serving import settings


def test_variants():
    assert settings('default', '') == dict(eager=False, env={}, log=False)      # vLLM as a user starts it
    assert settings('compile', '') == dict(eager=False, env={}) and settings('eager', '')['eager']
    with pytest.raises(SystemExit, match="unknown variant 'fast'"): settings('fast', '')
    with pytest.raises(SystemExit, match='needs --preload'): settings('preload', '')
