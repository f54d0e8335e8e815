"""Faults on the REAL SGLang server (sglang 0.5.23, --device cpu, SmolLM2-135M), started through EngineServer.

Real: the radix cache left on (the server really returns 1 row with cached_tokens=12 for a repeated 13-token prompt),
refused by the preflight and caught per response. The server SIGKILLed mid-extraction is test_sglang_real.py's last test
(its final-state server is the one killed: one server start fewer). Faults a real server cannot be made to show
(5xx, timeouts, torn bodies) are the fake server's (tests/fake_sglang.py)."""
import pytest
from eagle_nb.core import EagleNbError
from eagle_nb.sglang import SGLangClient, SampleFailed, preflight, sglang_server

pytestmark = pytest.mark.slow
L, H = 30, 576


@pytest.fixture(scope='module')
def radix_server(tmp_path_factory):
    "A final-state server with the radix cache ON: what a user gets when the flag is forgotten."
    srv = sglang_server('smollm2-135m', tmp_path_factory.mktemp('logs')/'sglang-radix.log', radix_cache=True)
    try:
        srv.start()
        yield srv
    finally: srv.stop()


def test_radix_cache_refused_by_preflight(radix_server):
    with pytest.raises(EagleNbError, match='--disable-radix-cache'):
        preflight([radix_server.url])


def test_radix_cache_truncated_response_caught(radix_server):
    ids = list(range(1000, 1013))                                             # 13 tokens, sent twice
    c = SGLangClient(radix_server.url, width=H, max_attempts=1)
    first = c.fetch(ids, 'a')                                                  # nothing cached yet: 13 rows
    assert first.shape == (13, H)
    with pytest.raises(SampleFailed) as e:
        c.fetch(ids, 'b')                                                      # the real server now computes 1 row
    assert e.value.kind == 'cached_tokens' and 'cached_tokens=12' in e.value.msg and '1 of 13 rows' in e.value.msg
