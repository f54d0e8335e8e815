"`bench/bench_vllm_serving.py` without a server: its variants (a bad one refused before minutes of start-up) and the prefill/decode split read off vLLM's request timings."
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


def test_phase_times_from_vllm_request_timings():
    "The names are vLLM 0.32's /metrics lines (histogram sums and counters, summed over label sets by `vllm_metrics`)."
    b = _bench()
    before = {'vllm:request_prefill_time_seconds_sum': 1.0, 'vllm:request_decode_time_seconds_sum': 4.0,
              'vllm:generation_tokens_total': 32.0, 'vllm:request_success_total': 2.0,
              'vllm:prompt_tokens_total': 400.0, 'vllm:prompt_tokens_cached_total': 0.0}
    after = {'vllm:request_prefill_time_seconds_sum': 11.2, 'vllm:request_decode_time_seconds_sum': 53.4,
             'vllm:generation_tokens_total': 1568.0, 'vllm:request_success_total': 26.0,
             'vllm:prompt_tokens_total': 5600.0, 'vllm:prompt_tokens_cached_total': 1300.0, 'vllm:other_total': 9.0}
    p = b.phase_times(before, after)
    assert p['prefill_s'] == pytest.approx(10.2) and p['decode_s'] == pytest.approx(49.4)
    assert p['generated'] == 1536 and p['requests'] == 24
    assert p['decode_tokens_per_s'] == pytest.approx((1536 - 24) / 49.4)   # each request's first token is its prefill's
    assert p['cached_share'] == pytest.approx(1300 / 5200)
    none = b.phase_times(before, before)                                    # no requests between the readings: nothing to divide
    assert none['decode_tokens_per_s'] is None and none['cached_share'] is None
