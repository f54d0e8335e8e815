"The teacher's temperature in training (`--teacher-temp`): `sharpen` by hand, the loss it gives, resume."
import json, math
import pytest, torch
from train_helpers import smoke_drafter, smoke_store
from eagle_nb.core import EagleNbError
from eagle_nb.train import TargetHead, TTTObjective, TrainConfig, collate, prepare_batch, sharpen, teach, train

torch.set_num_threads(1)

def test_sharpen_by_hand():
    "temp 1 leaves the teacher alone; temp t is softmax(log p / t); temp 0 is one-hot at the argmax."
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 0.5, 0.5]])
    p = logits.softmax(-1)
    am = p.argmax(-1)
    assert torch.equal(sharpen(p.clone(), am, 1.0), p)
    for t in (0.5, 0.25, 2.0):
        assert torch.allclose(sharpen(p.clone(), am, t), (logits / t).softmax(-1), atol=1e-6), t
    assert sharpen(p.clone(), am, 0).tolist() == [[1, 0, 0, 0], [0, 1, 0, 0]]
    sharp = sharpen(p.clone(), am, 0.5)
    assert torch.allclose(sharp.sum(-1), torch.ones(2)) and (sharp.max(-1).values > p.max(-1).values).all()

def test_hard_teacher_loss_is_the_argmax_cross_entropy():
    "With temp 0 each trained row's loss is -log q(target argmax) of the drafter; with temp 1 it is not."
    st, dr, ids, t2d, head_w = smoke_drafter()
    head = TargetHead(head_w, ids, 'cpu', torch.float32)
    samples = [st.get(i) for i in st.sample_ids[:3]]
    soft = prepare_batch(samples, 2, head, t2d, len(ids), 4096, torch.device('cpu'), torch.float32)
    hard = teach(collate(samples, 4096, torch.float32), 2, head, t2d, len(ids), torch.device('cpu'), temp=0)
    assert torch.equal(hard.rows, soft.rows) and torch.equal(hard.target_argmax, soft.target_argmax)
    assert torch.equal(hard.probs.argmax(-1), soft.probs.argmax(-1)) and (hard.probs.max(-1).values == 1).all()
    w = torch.ones(2)
    _, ce_hard, _ = TTTObjective(dr, 2)(hard, w)
    _, ce_soft, _ = TTTObjective(dr, 2)(soft, w)
    with torch.no_grad():
        hs = dr.forward_ttt(hard.aux, hard.input_ids, 2, hard.attention_mask)
        z = dr.lm_head(torch.stack(hs).flatten(0, 2)[hard.rows]).float()
        nll = -z.log_softmax(-1).gather(1, hard.target_argmax[:, None]).squeeze(1)
    assert torch.allclose(ce_hard.float(), nll, rtol=1e-4, atol=1e-4)
    assert (ce_soft.float() - nll).abs().max() > 1e-2                    # the soft teacher's loss is another one

def test_temp_trains_and_resumes(tmp_path):
    "A run at temp 0.5 trains and evaluates; resuming it at another temp is refused; a temp out of range is refused."
    kw = dict(store=smoke_store(), out=str(tmp_path/'out'), ttt_steps=2, batch_tokens=256, max_len=256, compile=False, eval_fraction=0.2)
    with pytest.raises(EagleNbError, match='teacher_temp'): TrainConfig(**kw, steps=4, teacher_temp=-1)
    train(TrainConfig(**kw, steps=4, teacher_temp=0.5))
    ev = json.loads((tmp_path/'out'/'eval.json').read_text())
    assert len(ev['acc']) == 2 and all(math.isfinite(x) for x in ev['loss'])
    assert json.loads((tmp_path/'out'/'train_config.json').read_text())['teacher_temp'] == 0.5
    with pytest.raises(EagleNbError, match=r"teacher_temp \(0.5 -> 1.0\)"): train(TrainConfig(**kw, steps=6))
