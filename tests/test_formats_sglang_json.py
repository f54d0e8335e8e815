"""Saved SGLang /generate responses -> store, validated like live ones; malformed records name file:line and field."""
import json
import pytest
import torch
from eagle_nb.extract import capture_hidden_states
from eagle_nb.formats import import_sglang_json, FormatError, import_main
from eagle_nb.store import HiddenStateStore, verify_store
from eagle_nb.target import tiny_target

TGT = tiny_target('qwen2')
L, H = TGT.num_layers, TGT.hidden_size
AUX = [2, 4, 5]


pytestmark = pytest.mark.usefixtures('one_torch_thread')


def prompts(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, TGT.vocab_size, (int(t),), generator=g) for t in torch.randint(3, 20, (n,), generator=g)]


def response(ids, ks=None, cached=0, mutate=None, compact=True):
    aux, final = capture_hidden_states(TGT, ids[None], layer_ids=ks or [L])
    x = final[0] if ks is None else aux[0].flatten(1)
    rows = x.bfloat16().float()[cached:].tolist()
    if mutate: rows = mutate(rows)
    body = dict(text='!', output_ids=[1], meta_info=dict(id='r', finish_reason={'type': 'length', 'length': 1}, prompt_tokens=len(ids),
                                                           completion_tokens=1, cached_tokens=cached, hidden_states=[rows], e2e_latency=0.1))
    return body


def dumps(o, compact=True):
    return json.dumps(o, separators=(',', ':') if compact else (', ', ': ')).replace('NaN', 'null')


def test_jsonl_json_list_and_merged_body(tmp_path):
    ps = prompts(4)
    (tmp_path/'a.jsonl').write_text(''.join(dumps(dict(id=f'a{i}', input_ids=p.tolist(), loss_mask=[0, 1] * (len(p) // 2) + [1] * (len(p) % 2),
                                                       response=response(p))) + '\n' for i, p in enumerate(ps[:2])))
    (tmp_path/'b.json').write_text(dumps([dict(id='b0', input_ids=ps[2].tolist(), response=response(ps[2]))], compact=False))
    (tmp_path/'c.json').write_text(dumps({**response(ps[3]), 'id': 'c0', 'input_ids': ps[3].tolist()}))   # body with input_ids added
    rep = import_sglang_json(tmp_path, tmp_path/'st', TGT, show_progress=False)
    assert rep.ok and rep.imported == 4, rep.summary()
    st = HiddenStateStore.open(tmp_path/'st')
    assert sorted(st.sample_ids) == ['a0', 'a1', 'b0', 'c0'] and st.layer_ids == [L]
    for sid, p in zip(['a0', 'a1', 'b0', 'c0'], ps):
        _, final = capture_hidden_states(TGT, p[None], layer_ids=[L])
        s = st.get(sid)
        assert torch.equal(s['final'], final[0].bfloat16().float()) and torch.equal(s['aux'][:, 0], s['final'])
    assert st.get('a1')['loss_mask'].tolist()[:2] == [0, 1] and verify_store(tmp_path/'st').ok


def test_aux_records_with_final_response(tmp_path):
    ps = prompts(2, seed=1)
    (tmp_path/'aux.jsonl').write_text(''.join(dumps(dict(id=f'x{i}', input_ids=p.tolist(), response=response(p, AUX),
                                                         final_response=response(p))) + '\n' for i, p in enumerate(ps)))
    rep = import_sglang_json(tmp_path, tmp_path/'st', TGT, layer_ids=AUX, show_progress=False)
    assert rep.ok, rep.summary()
    st = HiddenStateStore.open(tmp_path/'st')
    aux, final = capture_hidden_states(TGT, ps[1][None], layer_ids=AUX)
    assert st.layer_ids == AUX and torch.equal(st.get('x1')['aux'], aux[0].bfloat16().float())
    assert torch.equal(st.get('x1')['final'], final[0].bfloat16().float())


def test_bad_records_name_line_and_fix(tmp_path):
    p = prompts(1, seed=2)[0]; T = len(p)
    nan_row = lambda rows: [[float('nan')] * len(rows[0])] + rows[1:]
    lines = [
        (dumps(dict(id='ok', input_ids=p.tolist(), response=response(p))), None),
        ('{"id": "broken", "input_ids": [1, 2', 'not valid JSON'),
        (dumps(dict(id='noids', response=response(p))), 'input_ids: missing'),
        (dumps(dict(id='radix', input_ids=p.tolist(), response=response(p, cached=T - 1))), f'cached_tokens={T - 1}, 1 of {T} rows computed'),
        (dumps(dict(id='nan', input_ids=p.tolist(), response=response(p, mutate=nan_row))), 'NaN/inf'),
        (dumps(dict(id='ragged', input_ids=p.tolist(), response=response(p, mutate=lambda r: r[:-1] + [r[-1][:-1]]))), 'different widths'),
        (dumps(dict(id='mask', input_ids=p.tolist(), loss_mask=[1], response=response(p))), 'loss_mask: want'),
        (dumps(dict(id='nometa', input_ids=p.tolist(), response={'text': ''})), 'meta_info: missing'),
    ]
    (tmp_path/'r.jsonl').write_text('\n'.join(l for l, _ in lines) + '\n')
    rep = import_sglang_json(tmp_path/'r.jsonl', tmp_path/'st', TGT, on_error='skip', show_progress=False)
    assert rep.imported == 1 and len(rep.errors) == len(lines) - 1
    for (where, msg), (_, want) in zip(rep.errors, lines[1:]):
        assert want in msg, (where, msg, want)
    assert [w.rsplit(':', 1)[1] for w, _ in rep.errors] == [str(n) for n in range(2, len(lines) + 1)]   # FILE:LINE
    assert '--disable-radix-cache' in rep.errors[2][1]
    with pytest.raises(FormatError, match=r'r.jsonl:2: not valid JSON'):
        import_sglang_json(tmp_path/'r.jsonl', tmp_path/'st2', TGT, show_progress=False)
    (tmp_path/'aux.jsonl').write_text(dumps(dict(id='x', input_ids=p.tolist(), response=response(p, AUX))) + '\n')
    with pytest.raises(FormatError, match='aux.jsonl:1: final_response: missing'):
        import_sglang_json(tmp_path/'aux.jsonl', tmp_path/'st3', TGT, layer_ids=AUX, show_progress=False)
    with pytest.raises(FormatError, match=r'width|wide'):
        import_sglang_json(tmp_path/'aux.jsonl', tmp_path/'st4', TGT, show_progress=False)     # aux width, final expected


def test_cli(tmp_path):
    p = prompts(1, seed=3)[0]
    (tmp_path/'s.jsonl').write_text(dumps(dict(id='z', input_ids=p.tolist(), response=response(p))) + '\n')
    assert import_main(['--from', 'sglang-json', str(tmp_path/'s.jsonl'), '--out', str(tmp_path/'st'), '--target', 'tiny-qwen2']) == 0
    assert HiddenStateStore.open(tmp_path/'st').sample_ids == ['z']
