"""The streaming JSON-array reader: a file cut at ANY byte recovers exactly the complete records before the cut
and says `truncated_json`; records that span the sliding window's chunk boundaries (multi-byte UTF-8 included)
come out identical to `json.loads`."""
import gzip, json
import pytest
import eagle_nb.data as data
from eagle_nb.data import iter_records, load_conversations, DataError

def _records(n, seed=0):
    import random
    rng = random.Random(seed)
    words = ['alpha', 'beta', 'ünïcödé', '中文字', 'emoji 🙂', 'quote " and \\ slash', 'tab\tnew\nline', '\u00e9t\u00e9']
    return [{'id': f'r{i}', 'n': rng.randint(-999, 999) * 0.5, 'flag': rng.random() < .5, 'none': None,
             'conversations': [{'from': 'human', 'value': ' '.join(rng.choice(words) for _ in range(rng.randint(1, 6)))},
                               {'from': 'gpt', 'value': ' '.join(rng.choice(words) for _ in range(rng.randint(1, 9)))}]}
            for i in range(n)]

def _parse(path):
    st = {}
    items = list(iter_records(path, st))
    good = [r for _, r in items if not isinstance(r, DataError)]
    errs = [r for _, r in items if isinstance(r, DataError)]
    return good, errs, st

@pytest.mark.parametrize('ensure_ascii,indent', [(False, 2), (True, None)])
def test_cut_at_every_byte(tmp_path, ensure_ascii, indent):
    recs = _records(4)
    whole = json.dumps(recs, ensure_ascii=ensure_ascii, indent=indent).encode()
    # byte offset just after each record's closing brace
    ends, pos = [], 0
    for r in recs:
        pos = whole.index(json.dumps(r, ensure_ascii=ensure_ascii, indent=indent).replace('\n', '\n' + ' ' * (indent or 0)).encode(), pos)
        pos += len(json.dumps(r, ensure_ascii=ensure_ascii, indent=indent).replace('\n', '\n' + ' ' * (indent or 0)).encode())
        ends.append(pos)
    p = tmp_path/'cut.json'
    for k in range(2, len(whole)):
        cut = whole[:k]
        try: cut.decode('utf-8')
        except UnicodeDecodeError: continue   # a cut inside a UTF-8 sequence is a different error (tested below)
        p.write_bytes(cut)
        good, errs, st = _parse(p)
        want = sum(e <= k for e in ends)
        assert good == recs[:want], k
        assert len(errs) == 1 and errs[0].reason == 'truncated_json', (k, errs and str(errs[0]))
        assert st['stopped_at']['complete_records'] == want

def test_cut_inside_utf8_sequence(tmp_path):
    whole = json.dumps([{'id': 'a', 'conversations': [{'from': 'human', 'value': '中文'}]}], ensure_ascii=False).encode()
    k = whole.index('中'.encode()) + 1
    p = tmp_path/'c.json'; p.write_bytes(whole[:k])
    with pytest.raises(DataError) as ei: list(iter_records(p))
    assert ei.value.reason == 'not_utf8'

@pytest.mark.parametrize('chunk', [7, 64, 1000])
def test_small_windows_match_json_loads(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(data, '_CHUNK', chunk)
    recs = _records(60, seed=chunk)
    text = json.dumps(recs, ensure_ascii=False, indent=1)
    p = tmp_path/'w.json'; p.write_text(text, encoding='utf-8')
    good, errs, st = _parse(p)
    assert good == recs and not errs and 'stopped_at' not in st
    # locations are the lines where each record starts
    locs = [loc for loc, _ in iter_records(p)]
    lines = text.split('\n')
    starts = [i + 1 for i, l in enumerate(lines) if l == ' {']
    assert [int(l.rsplit(':', 1)[1]) for l in locs] == starts
    # a cut in the last record, found with a tiny window, reports the same byte offset as with a big one
    cut = text[:-40].encode()
    p.write_bytes(cut)
    _, errs, st_small = _parse(p)
    monkeypatch.setattr(data, '_CHUNK', 1 << 23)
    _, _, st_big = _parse(p)
    assert st_small['stopped_at'] == st_big['stopped_at'] and st_small['stopped_at']['complete_records'] == 59
    assert cut[st_big['stopped_at']['byte']:].startswith(b'{')

def test_bom_crlf_gzip_and_bare_values(tmp_path):
    recs = _records(3)
    text = json.dumps(recs, indent=2).replace('\n', '\r\n')
    p = tmp_path/'bom.json'; p.write_bytes(b'\xef\xbb\xbf' + text.encode())
    assert _parse(p)[0] == recs
    g = tmp_path/'x.jsonl.gz'
    with gzip.open(g, 'wt', encoding='utf-8') as f: f.write(''.join(json.dumps(r) + '\n' for r in recs))
    convs, rep = load_conversations(g)
    assert [c.id for c in convs] == ['r0', 'r1', 'r2'] and rep.items == 3
    # numbers at a window edge must not be cut short
    p2 = tmp_path/'nums.json'; p2.write_text('[' + ', '.join(str(10**i) for i in range(30)) + ']')
    assert _parse(p2)[0] == [10**i for i in range(30)]

def test_limit_reads_only_a_prefix(tmp_path):
    recs = _records(50)
    p = tmp_path/'big.json'; p.write_text(json.dumps(recs))
    convs, rep = load_conversations(p, limit=5)
    assert [c.id for c in convs] == [f'r{i}' for i in range(5)] and rep.limit_reached and rep.items == 5
