"""Faults on the REAL SGLang server (sglang 0.5.23, --device cpu, SmolLM2-135M), started through EngineServer.

Real: the radix cache left on (the server really returns 1 row with cached_tokens=12 for a repeated 13-token prompt),
refused by the preflight and caught per response; the server SIGKILLed mid-extraction: the run stops with one line,
a rerun against a fresh server resumes, losing and duplicating nothing. Faults a real server cannot be made to show
(5xx, timeouts, torn bodies) are the fake server's (tests/fake_sglang.py)."""
import pytest
import torch
from sglang_real_helpers import prepare_smollm2_samples, rel_err
from eagle_nb.core import EagleNbError
from eagle_nb.sglang import SGLangClient, SGLangServerSource, SampleFailed, preflight, sglang_server, start_sglang_server

pytestmark = pytest.mark.slow
L, H = 30, 576


@pytest.fixture(scope='module')
def started(tmp_path_factory):
    "Started together (one wait): a final-state server with the radix cache ON (what a user gets when the flag is"
    " forgotten) and a correct final-state server that the kill test kills."
    from concurrent.futures import ThreadPoolExecutor
    logs = tmp_path_factory.mktemp('logs')
    servers = {'radix': sglang_server('smollm2-135m', logs/'sglang-radix.log', radix_cache=True),
               'victim': sglang_server('smollm2-135m', logs/'sglang-1.log')}
    with ThreadPoolExecutor(2) as ex: errors = [f.exception() for f in [ex.submit(x.start) for x in servers.values()]]
    if any(errors):
        for x in servers.values(): x.stop()
        raise next(e for e in errors if e)
    yield servers
    for x in servers.values(): x.stop()


@pytest.fixture(scope='module')
def radix_server(started): return started['radix']


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
    radix_server.stop()                                                        # frees the CPU for the kill test


class KillAfter(SGLangServerSource):
    "The real source; the server is SIGKILLed once `after` samples came back (a crash mid-extraction)."
    def __init__(self, *a, victim=None, after=2, **kw):
        super().__init__(*a, **kw); self.victim, self.after = victim, after
    def states(self, requests):
        for i, s in enumerate(super().states(requests)):
            yield s
            if i + 1 == self.after: self.victim.kill()


def test_kill_mid_extraction_then_resume(started, tmp_path):
    from eagle_nb.extract import WriteConfig, write_store
    from eagle_nb.store import HiddenStateStore, verify_store
    from eagle_nb.data import TokenizedDataset
    data = prepare_smollm2_samples(tmp_path/'ds', n=10)
    ids = TokenizedDataset.open(data).ids
    store = tmp_path/'store'
    cfg = WriteConfig(progress=False, verbose=False, probe_samples=0)
    s1 = started['victim']
    src = KillAfter('smollm2-135m', [s1.url], layer_ids=None, concurrency=2, backoff=0.2, victim=s1, after=2, servers=[s1])
    with pytest.raises(EagleNbError) as e:
        write_store(src, data, store, cfg)
    src.close()
    msg = str(e.value)
    assert '\n' not in msg and 'stopped answering' in msg and 'rerun the same command to resume' in msg
    st = HiddenStateStore.open(store)
    kept = st.sample_ids
    assert 2 <= len(kept) < len(ids) and not st.manifest['complete']
    before = {k: st.get(k)['final'].clone() for k in kept}
    s2 = start_sglang_server('smollm2-135m', tmp_path/'sglang-2.log')
    src = SGLangServerSource('smollm2-135m', [s2.url], layer_ids=None, servers=[s2])
    try: rep = write_store(src, data, store, cfg)
    finally: src.close()
    assert not s2.alive()
    assert rep.complete and rep.skipped == len(kept) and rep.stored == len(ids) - len(kept) and not rep.failed
    st = HiddenStateStore.open(store)
    assert sorted(st.sample_ids) == sorted(ids) and len(st.sample_ids) == len(set(st.sample_ids))        # nothing lost, nothing twice
    assert verify_store(store).ok
    for k in kept: assert torch.equal(st.get(k)['final'], before[k])                # the first run's samples untouched
    assert all(rel_err(st.get(k)['final'], st.get(k)['aux'][:, 0]) == 0 for k in ids)
