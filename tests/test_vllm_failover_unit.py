"""VllmSource's failover when a server dies between answering a request and writing its hidden-states file (no vLLM
needed: the HTTP calls are replaced, the files are real). vLLM's connector answers first and writes afterwards, releasing
the file's lock when done or when its process dies; a server SIGKILLed in that window leaves a released lock and no file.
Seen under load in the real-vLLM kill test (tests/test_vllm_extract.py): the sample was reported failed (no_file) instead
of being fetched again from the other server."""
import threading
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

import eagle_nb.vllm as V

H, N, IDS = 8, 4, [5, 6, 7, 8, 9]


def _source(urls):
    "A VllmSource as __init__ leaves it, without servers or a preflight: only what fetch() and _fetch_from() read."
    s = object.__new__(V.VllmSource)
    s.urls, s._live, s._busy = list(urls), list(urls), {u: 0 for u in urls}
    s._lock, s.report = threading.Lock(), dict(requests=0, retries=0, dropped=[])
    s.models = {u: dict(id='m') for u in urls}
    s.timeout, s.hidden_size, s.server_layer_ids, s._columns, s.norm = 5.0, H, [2, 15, 27, 30], [0, 1, 2, 3], None
    return s


def _fake_call(tmp_path, dead_after_answer: set, alive: set):
    "Completions name a file per request: a written one for a healthy server, a lock and no file for one that died writing."
    n = [0]
    def call(url, path, body=None, timeout=600.0):
        n[0] += 1
        f = tmp_path/f'req{n[0]}.safetensors'
        if url in dead_after_answer: (tmp_path/f'{f.name}.lock').write_text('')     # lock released by the kernel, file never written
        else: save_file({'token_ids': torch.tensor(IDS), 'hidden_states': torch.randn(len(IDS), N, H).bfloat16()}, str(f))
        return {'kv_transfer_params': {'hidden_states_path': str(f)}}
    def health(url, timeout=2.0): return url.removesuffix('/health') in alive        # engines.http_ok, GET /health
    return call, health


def _patch(monkeypatch, fakes):
    import eagle_nb.engines as E
    call, health = fakes
    monkeypatch.setattr(V, '_call', call); monkeypatch.setattr(E, 'http_ok', health)


def test_a_server_dead_before_writing_is_failed_over(tmp_path, monkeypatch):
    a, b = 'http://127.0.0.1:1', 'http://127.0.0.1:2'
    _patch(monkeypatch, _fake_call(tmp_path, dead_after_answer={a}, alive={b}))
    src = _source([a, b])
    got = src.fetch(SimpleNamespace(sample_id='s0', input_ids=IDS))     # a is picked first (both idle, a listed first)
    assert got.failure is None and got.input_ids.tolist() == IDS and tuple(got.aux.shape) == (len(IDS), N - 1, H)
    assert src._live == [b] and src.report['retries'] == 1
    assert len(src.report['dropped']) == 1 and a in src.report['dropped'][0] and 'before writing' in src.report['dropped'][0]


def test_the_last_server_dead_before_writing_asks_for_a_rerun(tmp_path, monkeypatch):
    a = 'http://127.0.0.1:1'
    _patch(monkeypatch, _fake_call(tmp_path, dead_after_answer={a}, alive=set()))
    with pytest.raises(V.EagleNbError, match='unreachable.*rerun'):
        _source([a]).fetch(SimpleNamespace(sample_id='s0', input_ids=IDS))


def test_a_live_server_whose_file_is_not_here_is_a_failed_sample(tmp_path, monkeypatch):
    "A --url server on another machine writes where this process cannot read: that is not a server going down."
    a = 'http://127.0.0.1:1'
    _patch(monkeypatch, _fake_call(tmp_path, dead_after_answer={a}, alive={a}))
    src = _source([a])
    got = src.fetch(SimpleNamespace(sample_id='s0', input_ids=IDS))
    assert got.failure[0] == 'no_file' and 'must be shared' in got.failure[1]
    assert src._live == [a] and src.report['dropped'] == []
