"""Stores written by format v1 (the store module as committed before the shard log, loaded from git) open read-only
unchanged, verify, merge, and migrate to v2 when resumed, every sample kept bit for bit."""
import subprocess, sys, types
from pathlib import Path
import pytest, torch

from eagle_nb import store as v2
from eagle_nb.core import read_json

V1_COMMIT = 'ea32fa7'
TGT = dict(name='toy', architecture='LlamaForCausalLM', num_layers=6, hidden_size=8, vocab_size=50, config_hash='c0ffee')
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def v1():
    try: src = subprocess.check_output(['git', '-C', str(ROOT), 'show', f'{V1_COMMIT}:eagle_nb/store.py'], text=True, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError): pytest.skip(f'git history without {V1_COMMIT} (the v1 store module)')
    mod = types.ModuleType('eagle_nb._store_v1_test'); mod.__package__ = 'eagle_nb'
    sys.modules[mod.__name__] = mod
    exec(compile(src, f'{V1_COMMIT}:eagle_nb/store.py', 'exec'), mod.__dict__)
    assert mod.VERSION == 1
    return mod


def sample(i):
    g = torch.Generator().manual_seed(i); T = 3 + i % 5
    return dict(input_ids=torch.randint(0, 50, (T,), generator=g), loss_mask=torch.ones(T), aux=torch.randn(T, 3, 8, generator=g),
                final=torch.randn(T, 8, generator=g))


def write_v1(v1, d, ids):
    with v1.HiddenStateStore.create(d, target=TGT, layer_ids=[1, 3, 4], engine=dict(name='hf'), shard_bytes=600) as s:
        for i in ids: s.add(f's{i}', **sample(i))
    s.close(complete=True)


def test_v1_opens_verifies_and_migrates(tmp_path, v1):
    d = tmp_path/'st'; write_v1(v1, d, range(8))
    assert read_json(d/'manifest.json')['version'] == 1
    r = v2.HiddenStateStore.open(d)
    assert r.sample_ids == [f's{i}' for i in range(8)] and len(r.manifest['shards']) > 1
    want = {sid: r.raw(sid) for sid in r.sample_ids}
    rep = v2.verify_store(d); assert rep.ok and any('format v1' in n for n in rep.notes), str(rep)
    assert read_json(d/'manifest.json')['version'] == 1                       # reading changed nothing
    with v2.HiddenStateStore.create(d, target=TGT, layer_ids=[1, 3, 4], engine=dict(name='hf')) as s:   # resume: migrate
        assert 's3' in s and 's8' not in s
        s.add('s8', **sample(8))
    m = read_json(d/'manifest.json')
    assert (m['version'], m['migrated_from'], m['num_samples']) == (2, 1, 9) and 'samples' not in m and 'shards' not in m
    r = v2.HiddenStateStore.open(d)
    assert r.sample_ids == [f's{i}' for i in range(9)]
    for sid, t in want.items(): assert all(torch.equal(r.raw(sid)[k], t[k]) for k in t)
    assert v2.verify_store(d).ok


def test_merge_v1_and_v2_parts(tmp_path, v1):
    write_v1(v1, tmp_path/'parts'/'0-of-2', range(0, 6, 2))
    with v2.HiddenStateStore.create(tmp_path/'parts'/'1-of-2', target=TGT, layer_ids=[1, 3, 4], engine=dict(name='hf')) as s:
        for i in range(1, 6, 2): s.add(f's{i}', **sample(i))
    r = v2.merge_stores(tmp_path, [tmp_path/'parts'/'0-of-2', tmp_path/'parts'/'1-of-2'])
    assert sorted(r.sample_ids) == [f's{i}' for i in range(6)] and r.manifest['version'] == 2
    assert torch.equal(r.get('s4')['aux'], sample(4)['aux'].bfloat16().float()) and v2.verify_store(tmp_path).ok
