"""verify_store finds every kind of damage and names it; `eagle-nb verify` exits 0 / 1."""
import json, shutil
import pytest, torch

from eagle_nb.cli import main
from eagle_nb.store import HiddenStateStore, verify_store, _load_manifest, _new_log_name, _write_log, _header

TGT = dict(name='toy', architecture='LlamaForCausalLM', num_layers=6, hidden_size=8, vocab_size=50, config_hash='c0ffee')


@pytest.fixture
def store(tmp_path):
    d = tmp_path/'s'
    with HiddenStateStore.create(d, target=TGT, layer_ids=[1, 3, 4], engine=dict(name='hf'), shard_bytes=1500) as s:
        for i in range(6):
            T = 5 + i
            s.add(f'v{i}', torch.arange(T) % 50, torch.ones(T), torch.randn(T, 3, 8), torch.randn(T, 8))
    s.close(complete=True)
    return d


def edit_manifest(d, fn):
    "Edit the store's manifest as readers see it (header + shard and sample lists) and write it back, log checksums resealed."
    m = _load_manifest(d); fn(m)
    m['shard_log'] = _new_log_name(); _write_log(d, m); (d/'manifest.json').write_text(json.dumps(_header(m)))


def problems(d): return verify_store(d).problems


def test_clean(store, capsys):
    rep = verify_store(store); assert rep.ok and rep.samples == 6 and rep.shards >= 2, str(rep)
    assert main(['verify', str(store)]) == 0 and 'OK' in capsys.readouterr().out


def test_missing_shard(store, capsys):
    (store/'shard-00001.safetensors').unlink()
    assert any('shard-00001.safetensors: missing' in p for p in problems(store))
    assert main(['verify', str(store)]) == 1 and 'FAILED' in capsys.readouterr().out


def test_truncated_shard(store):
    f = store/'shard-00000.safetensors'; f.write_bytes(f.read_bytes()[:-10])
    ps = problems(store)
    assert any('bytes, manifest says' in p for p in ps) and any('sha256' in p for p in ps)


def test_duplicate_and_counts(store):
    edit_manifest(store, lambda m: m['samples'].append(dict(m['samples'][0])))
    ps = problems(store)
    assert any("'v0' is listed twice" in p for p in ps) and any('num_tokens' in p for p in ps)


def test_offsets_gap(store):
    edit_manifest(store, lambda m: m['samples'][1].update(offset=m['samples'][1]['offset'] + 1))
    assert any('gap or overlap' in p for p in problems(store))


def test_nonfinite_values_are_flagged(tmp_path):
    d = tmp_path/'nan'
    with HiddenStateStore.create(d, target=TGT, layer_ids=[1, 3, 4], engine=dict(name='hf')) as s:
        aux = torch.randn(4, 3, 8); aux[2, 1, 3] = float('nan')
        s.add('n0', [1, 2, 3, 4], [1, 1, 1, 1], aux, torch.randn(4, 8))
    assert any('aux has 1 non-finite' in p for p in problems(d))


def test_out_of_range_ids(tmp_path):
    d = tmp_path/'ids'
    with HiddenStateStore.create(d, target=TGT, layer_ids=[1, 3, 4], engine=dict(name='hf')) as s:
        s.add('o0', [1, 70], [1, 1], torch.randn(2, 3, 8), torch.randn(2, 8))
    assert any('input ids outside 0..49' in p for p in problems(d))


def test_orphan_shard_is_a_note_not_a_problem(store):
    shutil.copy(store/'shard-00000.safetensors', store/'shard-00099.safetensors')
    rep = verify_store(store)
    assert rep.ok and any('shard-00099' in n for n in rep.notes)


def test_not_a_store(tmp_path):
    assert main(['verify', str(tmp_path)]) == 1


def test_damaged_shard_log(store):
    m = json.loads((store/'manifest.json').read_text())
    log = store/m['shard_log']; b = bytearray(log.read_bytes()); b[80] ^= 0x01; log.write_bytes(bytes(b))   # one flipped bit in a record
    assert any('checksum does not match' in p for p in problems(store))
    log.write_bytes(bytes(b)[:m['log_bytes'] // 2])                                                        # cut in half
    assert any('truncated' in p for p in problems(store))
