"""The fast /generate decoder agrees with json.loads on every layout SGLang (orjson) or a proxy (json) can produce."""
import json, random
import numpy as np
import pytest
import torch
from eagle_nb.sglang import decode_generate_response, ResponseError, parse_float_tokens


def body(rows, decode_steps=0, compact=True, cached=0, extra_after=True, nan_as='null'):
    meta = {'id': 'x', 'prompt_tokens': len(rows), 'cached_tokens': cached,
            'hidden_states': [rows] + [[1.0] * len(rows[0])] * decode_steps}
    if extra_after: meta['e2e_latency'] = 0.5
    s = json.dumps({'text': 'a "hidden_states": [1,2] }', 'output_ids': [5], 'meta_info': meta},
                   separators=(',', ':') if compact else (', ', ': '), allow_nan=True)
    return s.replace('NaN', nan_as).encode()


def ref_rows(b: bytes):
    hs = json.loads(b.replace(b'null', b'NaN'))['meta_info']['hidden_states']
    return np.array(hs[0], np.float32)


@pytest.mark.parametrize('seed', range(6))
def test_random_layouts_agree(seed):
    rng = random.Random(seed)
    T, W = rng.randint(1, 40), rng.randint(1, 70)
    x = torch.randn(T, W) * 10 ** rng.randint(-6, 3)
    x = x.to(rng.choice([torch.bfloat16, torch.float16, torch.float32])).float()
    if seed % 2: x[0, 0] = float('nan')
    rows = x.tolist()
    b = body(rows, decode_steps=rng.randint(0, 3), compact=bool(seed % 3), extra_after=bool(seed % 2))
    obj, s = decode_generate_response(b)
    np.testing.assert_array_equal(s, ref_rows(b))
    assert 'hidden_states' not in obj['meta_info'] and obj['meta_info']['prompt_tokens'] == T
    assert obj['text'] == 'a "hidden_states": [1,2] }'         # a string containing the key does not confuse it


def test_special_values_and_exponents():
    toks = [b'1e-05', b'-3.0517578125e-05', b'1E+2', b'-0.0', b'null', b'NaN', b'Infinity', b'-Infinity', b'7']
    v = parse_float_tokens(toks)
    assert v[0] == np.float32(1e-5) and v[2] == 100 and np.signbit(v[3])
    assert np.isnan(v[4]) and np.isnan(v[5]) and v[6] == np.inf and v[7] == -np.inf and v[8] == 7


def test_one_row_and_no_states():
    o, s = decode_generate_response(body([[1.5, 2.5]], cached=12))
    assert s.shape == (1, 2) and o['meta_info']['cached_tokens'] == 12
    b = json.dumps({'text': '', 'meta_info': {'cached_tokens': 0}}).encode()
    assert decode_generate_response(b)[1] is None
    b = json.dumps({'text': '', 'meta_info': {'cached_tokens': 0, 'hidden_states': []}}).encode()
    assert decode_generate_response(b)[1] is None


def test_faults_are_classified():
    with pytest.raises(ResponseError) as e: decode_generate_response(body([[1.0, 2.0], [3.0]]))
    assert e.value.kind == 'ragged'
    b = body([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ResponseError) as e: decode_generate_response(b[:b.index(b'3.0')])
    assert e.value.kind == 'bad_json'
    with pytest.raises(ResponseError) as e: decode_generate_response(b'<html>502</html>')
    assert e.value.kind == 'bad_json'
    with pytest.raises(ResponseError) as e: decode_generate_response(b'{"meta_info":{"hidden_states":[[1,2],[3,4]]}}')
    assert e.value.kind == 'no_hidden_states'          # first entry must be the 2-D prefill list


def test_simdjson_path_equals_value_cache_path(monkeypatch):
    "The C-buffer path (pysimdjson) and the value-cache path decode a bf16 body to the same array."
    pytest.importorskip('simdjson', reason='pysimdjson is a requirement of eagle_nb (settings.ini); install it')
    import eagle_nb.sglang as sg
    x = (torch.randn(33, 96) * 3).to(torch.bfloat16).float()
    b = body(x.tolist())
    fast = decode_generate_response(b)[1]
    monkeypatch.setattr(sg, '_parse_value_simdjson', lambda value: None)
    np.testing.assert_array_equal(decode_generate_response(b)[1], fast)
    np.testing.assert_array_equal(fast, x.numpy())


def test_value_cache_bounded(monkeypatch):
    import eagle_nb.sglang as sg
    monkeypatch.setattr(sg, '_parse_value_simdjson', lambda value: None)   # the value-cache path, simdjson or not
    monkeypatch.setattr(sg, '_FLOAT_CACHE', dict(sg._SPECIAL))
    monkeypatch.setattr(sg, '_CACHE_MAX', 50)
    x = torch.randn(8, 16)                                   # fp32: 128 distinct values > the cap
    b = body(x.tolist())
    np.testing.assert_array_equal(decode_generate_response(b)[1], x.numpy())
    assert len(sg._FLOAT_CACHE) == len(sg._SPECIAL)          # nothing learnt past the cap
    y = torch.tensor([[0.5, 1.5], [0.5, -2.0]])
    np.testing.assert_array_equal(decode_generate_response(body(y.tolist()))[1], y.numpy())
    assert b'0.5' in sg._FLOAT_CACHE and len(sg._FLOAT_CACHE) == len(sg._SPECIAL) + 3
