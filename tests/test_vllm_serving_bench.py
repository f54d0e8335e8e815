"The variants of bench/bench_vllm_serving.py, read before any server starts (a bad one must stop it in a second, not after minutes)."
import sys
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]/'bench'))
from bench_vllm_serving import settings


def test_synthetic_tau_variant():
    s = settings('tau2.0', '', num_steps=3)
    assert s['synthetic_tau'] == 2.0 and s['eager'] and s['env'] == {}
    assert s['spec'] == dict(rejection_sample_method='synthetic', synthetic_acceptance_length=2.0)
    assert 'spec' not in settings('eager', '') and settings('eager', '').get('synthetic_tau') is None   # the real acceptance
    for bad in ('tau4.5', 'tau0.5', 'taux'):   # past 1 + num_steps, below 1, not a number
        with pytest.raises(SystemExit): settings(bad, '', num_steps=3)
    assert settings('tau4.0', '', num_steps=3)['synthetic_tau'] == 4.0
    with pytest.raises(SystemExit, match='unknown variant'): settings('fast', '')
