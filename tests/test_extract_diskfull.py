"""Disk full: the preflight refuses with the numbers before any work; a shard write that fails mid-run
(ENOSPC injected in the writer) leaves a valid store that a rerun completes, equal to an uninterrupted run."""
import errno, shutil
from collections import namedtuple
import pytest, torch
import safetensors.torch

from eagle_nb.core import EagleNbError
from eagle_nb.extract import ExtractConfig, extract, preflight
from eagle_nb.store import HiddenStateStore, verify_store
from eagle_nb.target import tiny_target


@pytest.fixture(scope='module')
def target():
    prev = torch.get_num_threads(); torch.set_num_threads(1)
    yield tiny_target('qwen2')
    torch.set_num_threads(prev)


def samples(n=30, V=300):
    g = torch.Generator().manual_seed(2)
    return [dict(id=f'd{i}', input_ids=torch.randint(3, V, (T := int(torch.randint(5, 60, (1,), generator=g)),), generator=g),
                 loss_mask=torch.ones(T, dtype=torch.uint8)) for i in range(n)]


def test_preflight_refuses_with_numbers(tmp_path, target):
    cfg = ExtractConfig(free_bytes=100_000, probe_batches=0, progress=False)
    with pytest.raises(EagleNbError, match=r'needs 0\.\d+ GiB .* 0\.00 GiB are free'):
        extract(samples(), target, tmp_path/'s', cfg, verbose=False)
    assert not (tmp_path/'s'/'manifest.json').exists()               # refused before creating anything


def test_preflight_measures_disk(tmp_path, target, monkeypatch):
    Usage = namedtuple('Usage', 'total used free')
    monkeypatch.setattr(shutil, 'disk_usage', lambda p: Usage(10**9, 10**9, 4096))
    with pytest.raises(EagleNbError, match='not enough disk'):
        preflight(samples(), target, tmp_path/'s', ExtractConfig(probe_batches=0), verbose=False)
    monkeypatch.setattr(shutil, 'disk_usage', lambda p: Usage(10**12, 0, 10**12))
    df = preflight(samples(), target, tmp_path/'s', ExtractConfig(probe_batches=1), verbose=False)
    assert df.attrs['tokens'] == sum(len(s['input_ids']) for s in samples())
    assert df.attrs['tokens_per_s'] > 0 and 'time' in df.index and 'disk' in df.index


def test_write_failure_mid_shard_leaves_valid_resumable_store(tmp_path, target, monkeypatch):
    cfg = ExtractConfig(token_budget=128, shard_bytes=16 << 10, probe_batches=0, progress=False)
    ref = extract(samples(), target, tmp_path/'ref', cfg, verbose=False)
    real, calls = safetensors.torch.save_file, [0]
    def flaky(tensors, path, metadata=None):
        calls[0] += 1
        if calls[0] == 3:                                             # the third shard: half-written, then ENOSPC
            with open(path, 'wb') as f: f.write(b'\0' * 1000)
            raise OSError(errno.ENOSPC, 'No space left on device')
        return real(tensors, path, metadata=metadata)
    monkeypatch.setattr(safetensors.torch, 'save_file', flaky)
    with pytest.raises(EagleNbError, match='still valid'):
        extract(samples(), target, tmp_path/'out', cfg, verbose=False)
    rep = verify_store(tmp_path/'out'); assert rep.ok, str(rep)
    part = HiddenStateStore.open(tmp_path/'out')
    assert 0 < len(part) < len(ref) and not part.manifest['complete']
    assert not [p for p in (tmp_path/'out').iterdir() if p.name.endswith('.tmp')]   # the half shard is gone
    monkeypatch.setattr(safetensors.torch, 'save_file', real)
    done = extract(samples(), target, tmp_path/'out', cfg, verbose=False)
    assert verify_store(done.path).ok and done.manifest['complete']
    assert {s['id']: s['sha256'] for s in done.manifest['samples']} == {s['id']: s['sha256'] for s in ref.manifest['samples']}
