"Keeping the drafter's lm_head at the target's rows (`--freeze-lm-head`): the same hidden gradient without the weight's, training, resume."
import json, shutil
import pytest, torch
from train_helpers import load_weights, smoke_store
from eagle_nb.core import EagleNbError
from eagle_nb.store import HiddenStateStore
from eagle_nb.train import TrainConfig, _head_ce, head_cross_entropy, list_checkpoints, load_target_heads, train

torch.set_num_threads(1)

def test_frozen_weight_gets_no_gradient_and_the_same_hidden_one():
    g = torch.Generator().manual_seed(3)
    h0, W0 = torch.randn(9, 8, generator=g), torch.randn(20, 8, generator=g)
    P = torch.randn(5, 20, generator=g).softmax(-1)
    rows = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2, 3]); am, wt = P.argmax(-1)[rows], torch.rand(9, generator=g)
    h1, W1 = h0.clone().requires_grad_(), W0.clone().requires_grad_()
    head_cross_entropy(h1, W1, P, rows, am, wt, chunk=4)[0].backward()
    h2 = h0.clone().requires_grad_()
    tot, ce, _ = head_cross_entropy(h2, W0, P, rows, am, wt, chunk=4)      # W0 does not require grad
    tot.backward()
    torch.testing.assert_close(h2.grad, h1.grad, rtol=0, atol=0)
    assert W0.grad is None and W1.grad is not None and W1.grad.abs().sum() > 0
    *_, gh, gw = _head_ce(h0, W0, P, rows, am, wt, 4, torch.float32, True, weight_grad=False)
    assert gw is None and gh is not None

def test_trains_with_the_targets_head_and_resume_keeps_the_choice(tmp_path):
    kw = dict(store=smoke_store(), ttt_steps=2, batch_tokens=256, max_len=256, compile=False, eval_fraction=0.2, steps=4, save_every=2)
    with pytest.raises(EagleNbError, match='freeze_lm_head'): TrainConfig(**kw, out='o', init_lm_head='random', freeze_lm_head=True)
    r = train(TrainConfig(**kw, out=str(tmp_path/'frozen'), freeze_lm_head=True))
    assert r.steps == 4 and json.loads((tmp_path/'frozen'/'train_config.json').read_text())['freeze_lm_head'] is True
    train(TrainConfig(**kw, out=str(tmp_path/'trained')))
    fz, tr = load_weights(tmp_path/'frozen'), load_weights(tmp_path/'trained')
    _, _, head_w = load_target_heads(HiddenStateStore.open(kw['store']).manifest['target']['name'])
    ids = torch.arange(len(fz['d2t'])) + fz['d2t']                      # draft id i is target id i + d2t[i]
    assert torch.equal(fz['d2t'], tr['d2t'])
    assert torch.equal(fz['lm_head.weight'], head_w[ids].float())        # kept exactly
    assert not torch.equal(tr['lm_head.weight'], head_w[ids].float())    # the default trains it
    assert not torch.equal(fz['fc.weight'], tr['fc.weight']) or not torch.equal(fz['norm.weight'], tr['norm.weight'])
    with pytest.raises(EagleNbError, match=r"changed\); resume") as e: train(TrainConfig(**kw, out=str(tmp_path/'frozen')))
    assert 'freeze_lm_head (True -> False)' in str(e.value)

def test_resume_of_a_frozen_run_is_bit_identical(tmp_path):
    "Drop the last checkpoint and run again: it resumes from step 2 and ends on the same weights (no optimizer state for the head)."
    kw = dict(store=smoke_store(), ttt_steps=2, batch_tokens=256, max_len=256, compile=False, eval_fraction=0.2, steps=4, save_every=2,
              freeze_lm_head=True, out=str(tmp_path/'a'))
    r1 = train(TrainConfig(**kw))
    first = load_weights(tmp_path/'a')
    ckpts = list_checkpoints(tmp_path/'a')
    assert len(ckpts) == 2
    shutil.rmtree(ckpts[-1])
    r2 = train(TrainConfig(**kw))
    assert r2.steps == 4 and 0 < r2.tokens < r1.tokens                  # it resumed: only steps 3 and 4 ran
    again = load_weights(tmp_path/'a')
    assert set(first) == set(again) and all(torch.equal(first[k], again[k]) for k in first)
