"""extract_via_sglang over real HTTP into the store: good samples stored exactly once, bad ones never, resume, fan-out,
aux mode with a second server pool, and the in-process Engine path (with a stand-in sglang module)."""
import sys, types
import numpy as np
import pytest
import torch
from fake_sglang import FakeSGLang, CLIENT_KIND
from eagle_nb.core import EagleNbError
from eagle_nb.sglang import extract_via_sglang, extract_via_engine
from eagle_nb.store import HiddenStateStore, verify_store
from eagle_nb.target import tiny_target

TGT = tiny_target('llama')
L, H = TGT.num_layers, TGT.hidden_size


@pytest.fixture(autouse=True, scope='module')
def one_torch_thread():
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def dataset(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        T = int(torch.randint(4, 40, (1,), generator=g))
        out.append(dict(id=f'conv-{i}', input_ids=torch.randint(0, TGT.vocab_size, (T,), generator=g),
                        loss_mask=(torch.arange(T) >= T // 2).to(torch.uint8)))
    return out


def hidden(ids, ks):
    with torch.no_grad(): hs = TGT.model(ids[None], output_hidden_states=True).hidden_states
    return torch.stack([hs[k][0] for k in ks], 1).to(torch.bfloat16).float()      # (T, n, H)


def check_store(path, data, layer_ids):
    st = HiddenStateStore.open(path)
    assert len(set(st.sample_ids)) == len(st.sample_ids)                  # never twice
    byid = {d['id']: d for d in data}
    for sid in st.sample_ids:
        s, d = st.get(sid), byid[sid]
        assert torch.equal(s['input_ids'], d['input_ids']) and torch.equal(s['loss_mask'], d['loss_mask'])
        assert torch.equal(s['aux'], hidden(d['input_ids'], layer_ids)), sid
        assert torch.equal(s['final'], hidden(d['input_ids'], [L])[:, 0]), sid
    assert verify_store(path).ok
    return st


def test_faults_retried_every_sample_once(tmp_path):
    data = dataset(16)
    kinds = ['5xx', 'drop', 'reset', 'truncate', 'nan', 'width', 'ragged', 'cached', 'chunked', 'badjson']
    with FakeSGLang(TGT, fault_rate=0.3, fault_kinds=kinds, seed=1) as a, FakeSGLang(TGT, fault_rate=0.3, fault_kinds=kinds, seed=2) as b:
        rep = extract_via_sglang(data, TGT.describe(), tmp_path/'st', [a.url, b.url], concurrency=4, max_attempts=10,
                                 backoff=0.0, show_progress=False)
        injected = a.injected + b.injected
        assert a.requests and b.requests                                   # fan-out
    assert rep.ok and rep.stored == 16, rep.summary()
    expected = {}
    for k, v in injected.items(): expected[CLIENT_KIND[k]] = expected.get(CLIENT_KIND[k], 0) + v
    assert dict(rep.client.faults) == expected and sum(expected.values()) > 0, (rep.client.faults, injected)
    st = check_store(tmp_path/'st', data, [L])
    assert st.manifest['complete'] and st.manifest['engine']['mode'] == 'final'
    assert set(st.manifest['engine']['servers']) == {a.url, b.url}
    assert st.manifest['engine']['servers'][a.url]['args']['disable_radix_cache'] is True


def test_bad_samples_never_stored_then_resume(tmp_path):
    data = dataset(12, seed=1)
    kinds = ['nan', 'width', 'ragged', 'cached', 'chunked']
    with FakeSGLang(TGT, fault_rate=0.6, fault_kinds=kinds, seed=3) as srv:
        rep = extract_via_sglang(data, TGT.describe(), tmp_path/'st', [srv.url], max_attempts=2, backoff=0.0, show_progress=False)
    assert rep.failed and rep.stored + len(rep.failed) == 12
    st = check_store(tmp_path/'st', data, [L])
    assert set(st.sample_ids) == {d['id'] for d in data} - set(rep.failed) and not st.manifest['complete']
    assert 'failed:' in rep.summary()
    with FakeSGLang(TGT) as srv:                                           # a healthy server: finish the job
        rep2 = extract_via_sglang(data, TGT.describe(), tmp_path/'st', [srv.url], show_progress=False)
        assert srv.requests == len(rep.failed)                             # only the missing ones were fetched
    assert (rep2.skipped, rep2.stored, rep2.ok) == (12 - len(rep.failed), len(rep.failed), True)
    assert check_store(tmp_path/'st', data, [L]).manifest['complete']


def test_aux_mode_with_final_servers(tmp_path):
    data, ks = dataset(6, seed=2), [2, 4, 5]
    with FakeSGLang(TGT, layer_ids=ks) as aux, FakeSGLang(TGT) as fin:
        rep = extract_via_sglang(data, TGT.describe(), tmp_path/'st', [aux.url], layer_ids=ks, final_urls=[fin.url],
                                 show_progress=False)
        with pytest.raises(EagleNbError, match='final_urls'):
            extract_via_sglang(data, TGT.describe(), tmp_path/'x', [aux.url], layer_ids=ks)
        with pytest.raises(EagleNbError, match=r'rows are 192 wide, expected 128.*2 layers'):
            extract_via_sglang(data, TGT.describe(), tmp_path/'y', [aux.url], layer_ids=[2, 4], final_urls=[fin.url], show_progress=False)
    assert rep.ok and rep.stored == 6
    st = check_store(tmp_path/'st', data, ks)
    assert st.layer_ids == ks and st.manifest['engine']['mode'] == 'aux' and 'final_servers' in st.manifest['engine']


def test_engine_path_with_stand_in_sglang(tmp_path, monkeypatch):
    data = dataset(5, seed=3)
    calls = {}
    class Engine:          # the sglang.Engine surface we use: generate(input_ids=..., return_hidden_states=True), shutdown()
        def __init__(self, **kw): calls['kw'] = kw
        def generate(self, input_ids, sampling_params, return_hidden_states):
            assert sampling_params == {'max_new_tokens': 1, 'temperature': 0} and return_hidden_states
            return [{'text': '', 'meta_info': {'cached_tokens': 0, 'hidden_states': [hidden(torch.tensor(ids), [L])[:, 0].tolist()]}}
                    for ids in input_ids]
        def shutdown(self): calls['shutdown'] = True
    monkeypatch.setitem(sys.modules, 'sglang', types.SimpleNamespace(Engine=Engine, __version__='0.0-test'))
    rep = extract_via_engine(data, TGT.describe(), tmp_path/'st', 'tiny-llama', batch_size=2, show_progress=False)
    assert rep.ok and rep.stored == 5 and calls['shutdown']
    assert calls['kw']['disable_radix_cache'] and calls['kw']['chunked_prefill_size'] == -1 and calls['kw']['skip_tokenizer_init']
    check_store(tmp_path/'st', data, [L])
    monkeypatch.setitem(sys.modules, 'sglang', None)                     # not installed
    with pytest.raises(EagleNbError, match=r'pip install "eagle_nb\[sglang\]"'):
        extract_via_engine(data, TGT.describe(), tmp_path/'z', 'tiny-llama')


def test_extract_cli_backend_sglang(tmp_path):
    # `eagle-nb extract --backend sglang` (eagle_nb.extract) calls extract_via_sglang: the hook end to end
    import json
    from eagle_nb.cli import extract_main
    data = dataset(5, seed=4)
    with open(tmp_path/'data.jsonl', 'w') as f:
        for d in data: f.write(json.dumps(dict(id=d['id'], input_ids=d['input_ids'].tolist(), loss_mask=d['loss_mask'].tolist())) + '\n')
    ks = [2, L // 2, L - 3]                                                # what --layers auto asks for
    with FakeSGLang(TGT, layer_ids=ks) as aux, FakeSGLang(TGT) as fin:
        rc = extract_main(['--data', str(tmp_path/'data.jsonl'), '--target', 'tiny-llama', '--backend', 'sglang',
                           '--url', aux.url, '--final-url', fin.url, '--out', str(tmp_path/'st')])
    assert rc == 0
    check_store(tmp_path/'st', data, ks)
