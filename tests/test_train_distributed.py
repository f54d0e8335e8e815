"""Data-parallel training with torchrun (2 processes, gloo on CPU) matches one process on the same global batch.

FSDP (`--fsdp`, FSDP2 `fully_shard`) is exercised the same way on CPU/gloo: sharding, gathered checkpoints and
resume. What this cannot show: NCCL, multi-GPU memory savings, or FSDP with a target too big for one device.
"""
import torch, pytest
from train_helpers import smoke_store, train_cli, load_weights, metrics

ARGS = ['--steps', '4', '--micro-batches', '2', '--ttt-steps', '3', '--lr', '1e-2', '--batch-tokens', '256',
        '--max-len', '256', '--eval-fraction', '0.1', '--draft-vocab-size', '200', '--no-amp', '--no-compile', '--save-every', '2']

def _same(a_dir, b_dir, atol=2e-5):
    a, b = load_weights(a_dir), load_weights(b_dir)
    assert sorted(a) == sorted(b)
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert worst < atol, f"max |difference| {worst}"
    la = [r['loss'] for r in metrics(a_dir) if r['kind'] == 'train']
    lb = [r['loss'] for r in metrics(b_dir) if r['kind'] == 'train']
    assert len(la) == len(lb) == 4 and all(abs(x - y) < 1e-4 * max(1, abs(x)) for x, y in zip(la, lb)), (la, lb)
    ea = [r for r in metrics(a_dir) if r['kind'] == 'eval'][-1]; eb = [r for r in metrics(b_dir) if r['kind'] == 'eval'][-1]
    assert ea['rows'] == eb['rows'] and all(abs(x - y) < 1e-3 for x, y in zip(ea['acc'], eb['acc']))
    return worst

@pytest.fixture(scope='module')
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp('one')/'out'
    train_cli(['--store', smoke_store(), *ARGS, '--out', str(out)])
    return out

def test_ddp_two_processes_match_one(one_process, tmp_path):
    out = tmp_path/'ddp'
    train_cli(['--store', smoke_store(), *ARGS, '--out', str(out)], torchrun=2)
    print('DDP vs one process, max |dw|:', _same(one_process, out))

@pytest.mark.slow   # two more torchrun launches (~40 s); `make test` runs it, `run_all.py --fast` skips it
def test_fsdp_two_processes_match_one_and_resume(one_process, tmp_path):
    out = tmp_path/'fsdp'
    train_cli(['--store', smoke_store(), *ARGS, '--fsdp', '--out', str(out)], torchrun=2)
    print('FSDP vs one process, max |dw|:', _same(one_process, out))
    # resume from the FSDP checkpoint at step 2 (gathered weights + full optimizer state) -> the same end point
    import shutil
    ck = out/'checkpoints'
    shutil.rmtree(ck/'step-00000004')
    train_cli(['--store', smoke_store(), *ARGS, '--fsdp', '--out', str(out)], torchrun=2)
    _same(one_process, out)

@pytest.mark.slow   # two more launches (~40 s)
def test_fsdp_with_a_frozen_head_matches_one_process(tmp_path):
    "`--freeze-lm-head` under FSDP2: a frozen parameter among trained ones in the sharded module, the same end point as one process."
    one, sharded = tmp_path/'one', tmp_path/'fsdp'
    train_cli(['--store', smoke_store(), *ARGS, '--freeze-lm-head', '--out', str(one)])
    train_cli(['--store', smoke_store(), *ARGS, '--freeze-lm-head', '--fsdp', '--out', str(sharded)], torchrun=2)
    print('FSDP vs one process, frozen head, max |dw|:', _same(one, sharded))
    assert torch.equal(load_weights(one)['lm_head.weight'], load_weights(sharded)['lm_head.weight'])
