"Chain-aligned TTT (`--ttt-align`): which rows live on a chain, the step-by-step loss against the same loss weighted at once, resume."
import json
import pytest, torch
from train_helpers import smoke_drafter, smoke_store
from eagle_nb.core import EagleNbError
from eagle_nb.train import Batch, TargetHead, TTTObjective, TrainConfig, chain_alive, head_cross_entropy, prepare_batch, train

torch.set_num_threads(1)
S = 3

def test_chain_alive_by_hand():
    "Step 0 is always live; row (i, t) lives when rows (j, t), j < i, were trained and went on ('greedy': and the data did too)."
    # one sequence, 5 rows; step 1 has no row at t=1 (its teacher was not a draft token), step 2 rows at t=0, 1, 2
    rows = torch.tensor([0, 1, 2, 3, 4, 5 + 0, 5 + 2, 5 + 3, 10 + 0, 10 + 1, 10 + 2])
    step = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
    ok = torch.tensor([1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1], dtype=torch.bool)
    greedy = torch.tensor([1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1], dtype=torch.bool)
    b = Batch(ids=['a'], aux=torch.zeros(1, 5, 2), input_ids=torch.zeros(1, 5, dtype=torch.long), attention_mask=torch.ones(1, 5),
              probs=torch.zeros(0, 1), rows=rows, target_rows=rows, target_argmax=rows, row_step=step,
              counts=torch.tensor([5, 3, 3]), tokens=5, padded=5, greedy=greedy)
    #                               step 0 t=0..4 | step 1 t=0,2,3 | step 2 t=0,1,2
    assert chain_alive(b, ok, 'draft').tolist() == [True] * 5 + [True, False, True] + [True, False, False]
    assert chain_alive(b, ok, 'greedy').tolist() == [True] * 5 + [True, False, False] + [True, False, False]

def _trained_setup(align):
    "A drafter trained 40 steps on 4 smoke samples, so that some chains live past step 0; the batch; per-step weights."
    st, dr, ids, t2d, head_w = smoke_drafter()
    b = prepare_batch([st.get(i) for i in st.sample_ids[:4]], S, TargetHead(head_w, ids, 'cpu', torch.float32), t2d, len(ids),
                      4096, torch.device('cpu'), torch.float32)
    w = (torch.tensor([0.8 ** i for i in range(S)]) / b.counts.clamp_min(1)).float()
    off = TTTObjective(dr, S)
    opt = torch.optim.Adam(dr.parameters(), lr=3e-3)
    for _ in range(40):
        off(b, w)[0].backward(); opt.step(); opt.zero_grad()
    return dr, b, w, ids, t2d

@pytest.mark.parametrize('align', ['draft', 'greedy'])
def test_aligned_loss_is_the_live_rows_loss(align):
    "The step-by-step loss and gradients equal one fused call with the dead rows' weights zeroed."
    dr, b, w, *_ = _trained_setup(align)
    loss, ce, ok = TTTObjective(dr, S, align=align)(b, w)
    loss.backward()
    g = {n: p.grad.clone() for n, p in dr.named_parameters() if p.grad is not None}; dr.zero_grad()
    live = chain_alive(b, ok, align)
    n_live = [int(live[b.row_step == i].sum()) for i in range(S)]
    assert n_live[0] == int(b.counts[0]) and 0 < n_live[2] < n_live[1] < n_live[0]   # the test sees chains die and live
    rw = torch.where(live, w[b.row_step], 0.0)
    hs = dr.forward_ttt(b.aux, b.input_ids, S, b.attention_mask)
    ref, ref_ce, ref_ok = head_cross_entropy(torch.stack(hs).flatten(0, 2)[b.rows], dr.lm_head.weight, b.probs, b.target_rows,
                                             b.target_argmax, rw.float())
    ref.backward()
    assert torch.equal(ok, ref_ok) and torch.allclose(ce, ref_ce.detach(), atol=1e-5)
    assert abs(loss.item() - ref.item()) < 1e-5 * max(1, abs(ref.item()))
    for n, p in dr.named_parameters():
        if n in g: assert torch.allclose(g[n], p.grad, atol=1e-6, rtol=1e-4), n
    # and it is not the unaligned loss
    assert abs(TTTObjective(dr, S)(b, w)[0].item() - loss.item()) > 1e-3

def test_greedy_flag_is_the_data_agreeing_with_the_teacher():
    "Batch.greedy of row (i, t): the token step i+1 reads there (t+i+2) is the teacher's argmax at t+i+1."
    dr, b, w, ids, t2d = _trained_setup('greedy')
    B, T1 = b.input_ids.shape
    pos = b.rows - b.row_step * (B * T1)
    bb, t = pos // T1, pos % T1
    nxt = b.input_ids[bb, t + b.row_step + 1]                 # Batch.input_ids[t] is token t+1
    want = ids[b.target_argmax] == nxt
    assert torch.equal(b.greedy, want) and 0 < want.float().mean() < 1

def test_align_trains_resumes_and_reports_chains(tmp_path):
    "`--ttt-align` trains, eval.json reports acc_chain/tau_chain, and a resume with another align is refused."
    path, out = smoke_store(), str(tmp_path/'out')
    kw = dict(store=path, out=out, ttt_steps=S, batch_tokens=256, max_len=256, compile=False, eval_fraction=0.2)
    with pytest.raises(EagleNbError, match='ttt_align'): TrainConfig(**kw, steps=4, ttt_align='sometimes')
    train(TrainConfig(**kw, steps=4, ttt_align='greedy'))
    ev = json.loads((tmp_path/'out'/'eval.json').read_text())
    assert len(ev['acc_chain']) == S and ev['acc_chain'][0] == ev['acc'][0] and ev['chain_rows'][0] == ev['rows'][0]
    assert ev['chain_rows'][2] <= ev['chain_rows'][1] < ev['rows'][1]
    with pytest.raises(EagleNbError, match=r"ttt_align \('greedy' -> 'off'\)"): train(TrainConfig(**kw, steps=6, ttt_align='off'))
