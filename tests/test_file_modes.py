"""Files eagle_nb writes honour the umask like a plain open(): under umask 022 a drafter checkpoint, its SGLang and
speculators exports and a store are readable by group and others (a serving engine running as another user)."""
import os, stat
import pytest, torch

from eagle_nb.target import tiny_target
from eagle_nb.drafter import DrafterConfig, Eagle3Drafter, vocab_map, save_drafter, export_drafter
from eagle_nb.store import HiddenStateStore


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def modes(d):
    return {p.relative_to(d).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in d.rglob('*') if p.is_file() and p.name != '.lock'}


def test_exports_readable_by_others(tmp_path, umask022):
    t = tiny_target('llama', seed=1)
    c = DrafterConfig.from_target(t, 40)
    torch.manual_seed(0)
    d = Eagle3Drafter(c, t.model.get_input_embeddings().weight).eval()
    d.set_vocab(*vocab_map(torch.arange(40) * 2, c.vocab_size))
    save_drafter(d, tmp_path/'ckpt')
    export_drafter(tmp_path/'ckpt', 'sglang', tmp_path/'sglang')
    export_drafter(tmp_path/'ckpt', 'speculators', tmp_path/'spec')
    for sub in ('ckpt', 'sglang', 'spec'):
        m = modes(tmp_path/sub)
        assert 'model.safetensors' in m and 'config.json' in m, m
        assert all(v == 0o644 for v in m.values()), (sub, {k: oct(v) for k, v in m.items()})


def test_store_files_follow_the_umask(tmp_path):
    TGT = dict(name='toy', architecture='LlamaForCausalLM', num_layers=6, hidden_size=8, vocab_size=50, config_hash='c0ffee')
    old = os.umask(0o027)   # group may read, others may not
    try:
        with HiddenStateStore.create(tmp_path/'s', target=TGT, layer_ids=[1, 3, 4], engine=dict(name='hf')) as s:
            s.add('a', [1, 2], [1, 1], torch.randn(2, 3, 8), torch.randn(2, 8))
    finally: os.umask(old)
    m = modes(tmp_path/'s')
    assert len(m) == 3 and all(v == 0o640 for v in m.values()), {k: oct(v) for k, v in m.items()}
