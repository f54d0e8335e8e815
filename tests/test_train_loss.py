"The TTT loss: shifted masks (the first response token IS trained), the fused head against plain autograd, top-k teachers."
import json, math
import pytest, torch
from train_helpers import smoke_store
from eagle_nb.core import EagleNbError
from eagle_nb.drafter import DrafterConfig, Eagle3Drafter, vocab_map
from eagle_nb.store import HiddenStateStore
from eagle_nb.train import (TargetHead, TTTObjective, TrainConfig, config_from_args, draft_vocab_from_store, head_cross_entropy,
                            load_target_heads, prepare_batch, topk_distribution, ttt_masks, plan_batches, padding_fraction,
                            heldout_split, train, ce_kernels, _ce_grad, _ce_stats)

torch.set_num_threads(1)

def _setup(steps=3, dtype=torch.float32, draft=200):
    st = HiddenStateStore.open(smoke_store())
    tgt, emb, head_w = load_target_heads(st.manifest['target']['name'])
    ids = draft_vocab_from_store(st, draft)
    d2t, t2d = vocab_map(ids, tgt.vocab_size)
    torch.manual_seed(0)
    dr = Eagle3Drafter(DrafterConfig.from_target(tgt, len(ids), st.layer_ids), emb).set_vocab(d2t, t2d)
    head = TargetHead(head_w, ids, 'cpu', dtype)
    return st, dr, head, t2d, ids

def _loss(obj, sample, head, t2d, ids, steps):
    b = prepare_batch([sample], steps, head, t2d, len(ids), 4096, torch.device('cpu'), torch.float32)
    w = torch.tensor([0.8 ** i for i in range(steps)]) / b.counts.clamp_min(1)
    with torch.no_grad(): return obj(b, w.float())[0].item(), b

def test_first_response_token_is_trained():
    "Changing the target's distribution at the position that teaches the first response token changes the loss."
    steps = 3
    st, dr, head, t2d, ids = _setup(steps, draft=10**6)     # the whole target vocab: every target argmax is a draft token
    obj = TTTObjective(dr, steps)
    s = st.get(st.sample_ids[0])
    mask = s['loss_mask'].bool()
    first = int(mask.nonzero()[0])                    # the first response token
    assert first >= 3 and not mask[first - 1]
    base, b = _loss(obj, s, head, t2d, ids, steps)
    # step 0 row first-2 (state at first-2, input token first-1) predicts token `first` from the target at first-1
    T = len(s['input_ids'])
    row0 = (b.rows < T - 1) & (b.rows % (T - 1) == first - 2)
    taught = torch.cat([mask[1:], torch.tensor([False])]).nonzero().flatten()   # positions whose teacher is kept
    assert row0.sum() == 1 and int(taught[b.target_rows[row0]]) == first - 1
    def perturbed(pos):
        s2 = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
        s2['final'][pos] = torch.roll(s2['final'][pos], 7) * 3          # a different teacher at `pos`
        return _loss(obj, s2, head, t2d, ids, steps)[0]
    assert abs(perturbed(first - 1) - base) > 1e-4        # teaches token `first`: trained (SpecForge #885 would skip it)
    assert perturbed(first - 2) == base                    # teaches token first-1, a prompt token: not trained
    assert perturbed(T - 1) == base                        # teaches a token past the end: not trained
    # SpecForge's reading indexes the mask at the teacher's position (first-1), a prompt token: that row is dropped
    lm = mask[None].long()
    assert ttt_masks(lm, torch.ones_like(lm), 1)[0, 0, first - 2] and not mask[first - 1]

def test_loss_is_the_mean_over_trained_rows_weighted_per_step():
    steps = 3
    st, dr, head, t2d, ids = _setup(steps)
    obj = TTTObjective(dr, steps, chunk=50)
    b = prepare_batch([st.get(i) for i in st.sample_ids[:3]], steps, head, t2d, len(ids), 4096, torch.device('cpu'), torch.float32)
    w = torch.tensor([0.8 ** i for i in range(steps)]) / b.counts.clamp_min(1)
    loss, ce, ok = obj(b, w.float())
    # the same from materialized logits and log_softmax
    hs = dr.forward_ttt(b.aux, b.input_ids, steps, b.attention_mask)
    logp = dr.lm_head(torch.stack(hs).flatten(0, 2)).log_softmax(-1)[b.rows]
    ref_ce = -(b.probs[b.target_rows] * logp).sum(-1)
    ref = sum(0.8 ** i * ref_ce[b.row_step == i].mean() for i in range(steps))
    assert torch.allclose(ce, ref_ce.detach(), atol=1e-4)
    assert abs(loss.item() - ref.item()) < 1e-4
    loss.backward()
    g1 = {n: p.grad.clone() for n, p in dr.named_parameters() if p.grad is not None}
    dr.zero_grad(); ref.backward()
    for n, p in dr.named_parameters():
        if p.grad is not None: assert torch.allclose(g1[n], p.grad, atol=1e-5, rtol=1e-3), n
    # no row past the end, none on a prompt token
    T = b.input_ids.shape[1] + 1
    assert int(b.counts[0]) >= int(b.counts[-1]) and int(b.rows.numel()) == int(b.counts.sum())

def test_bf16_head_close_to_fp32():
    g = torch.Generator().manual_seed(0)
    h, W = torch.randn(300, 64, generator=g), torch.randn(500, 64, generator=g) * 0.2
    P = (torch.randn(40, 500, generator=g) * 3).softmax(-1)
    rows = torch.randint(0, 40, (300,), generator=g); am = P.argmax(-1)[rows]; wt = torch.full((300,), 1 / 300)
    a = head_cross_entropy(h, W, P, rows, am, wt, chunk=128, dtype=torch.float32)[0]
    b = head_cross_entropy(h, W, P, rows, am, wt, chunk=128, dtype=torch.bfloat16)[0]
    assert abs(a - b) / a < 1e-2

@pytest.mark.slow
def test_compiled_kernel_matches_eager():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(100, 300, generator=g).bfloat16(); P = torch.randn(20, 300, generator=g).softmax(-1)
    rows = torch.randint(0, 20, (100,), generator=g); w = torch.rand(100, generator=g); tgt = P.argmax(-1)[rows]
    (ge, se), (gc, sc) = ce_kernels(False), ce_kernels(True)
    for x, y in zip(ge(z, P, rows, w, tgt), gc(z, P, rows, w, tgt)): assert torch.allclose(x.float(), y.float(), atol=1e-5)
    for x, y in zip(se(z, P, rows, tgt), sc(z, P, rows, tgt)): assert torch.allclose(x.float(), y.float(), atol=1e-5)

def test_topk_teacher_equals_final_teacher_when_k_covers_the_vocab(tmp_path):
    "A store with top-k log-probs over the whole draft vocab gives the same teacher as the lm_head on final states."
    from train_helpers import _code_hash
    path = smoke_store(n_samples=16, topk=256)            # draft vocab of the smoke target: <= 256 tokens
    st = HiddenStateStore.open(path)
    m = st.manifest
    tgt, emb, head_w = load_target_heads(m['target']['name'])
    from eagle_nb.train import resolve_draft_vocab
    ids, src = resolve_draft_vocab(TrainConfig(store=path, out=str(tmp_path)), st)
    assert 'hash checked' in src and len(ids) == m['draft_vocab']['size']
    d2t, t2d = vocab_map(ids, tgt.vocab_size)
    s = st.get(st.sample_ids[0])
    p1, a1, ok1 = TargetHead(head_w, ids, 'cpu', torch.float32).distribution(s['final'])
    p2, a2, ok2 = topk_distribution(s['topk_ids'], s['topk_logprobs'], s['target_argmax'], t2d, len(ids))
    assert torch.equal(ok1, ok2)
    diff = ok1 & (a1 != a2)    # argmax agrees but at near-ties (the extractor's GEMM order is not the head's; seen: 1 of 111 rows)
    r_ = diff.nonzero()[:, 0]
    assert diff.sum() <= max(1, ok1.sum() // 50), f'{diff.sum()} of {ok1.sum()} argmaxes differ'
    assert all(abs(p1[i, a1[i]] - p1[i, a2[i]]) < 1e-4 for i in r_.tolist())   # and where they differ, the two tokens tie
    assert torch.allclose(p1, p2, atol=2e-3)           # fp16 log-probs in the store
    r = train(TrainConfig(store=path, out=str(tmp_path/'out'), steps=3, ttt_steps=2, batch_tokens=256, max_len=256,
                          eval_fraction=0.2, compile=False))
    assert math.isfinite(r.last['loss']) and r.eval['rows'][0] > 0

def test_batches_waste_little_padding_and_split_by_id():
    st = HiddenStateStore.open(smoke_store())
    lengths = {e['id']: e['length'] for e in st.manifest['samples']}
    plan = plan_batches(lengths, 1024, seed=0, epoch=0)
    assert padding_fraction(plan, lengths) < 0.15                           # 48 samples: few per length bucket
    g = torch.Generator().manual_seed(0)                                    # a ShareGPT-like spread of 5000 lengths
    many = {f'x{i}': int(L) for i, L in enumerate(torch.empty(5000).log_normal_(6, 0.8, generator=g).clamp(8, 2048))}
    assert padding_fraction(plan_batches(many, 4096, seed=0, epoch=0), many) < 0.02
    assert plan != plan_batches(lengths, 1024, seed=0, epoch=1)          # a new order each epoch
    tr, ho = heldout_split(list(lengths), 0.2, seed=0)
    assert ho and not set(tr) & set(ho) and set(tr) | set(ho) == set(lengths)

def test_config_errors_say_what_to_change(tmp_path):
    with pytest.raises(EagleNbError, match='micro_batches'): TrainConfig(store='s', out='o', micro_batches=0)
    with pytest.raises(EagleNbError, match='warmup'): TrainConfig(store='s', out='o', warmup=2)
    y = tmp_path/'c.yaml'; y.write_text('lr: 0.001\nttt_steps: 3\n')
    c = config_from_args(['--config', str(y), '--store', 's', '--out', 'o', '--ttt-steps', '5'])
    assert (c.lr, c.ttt_steps) == (0.001, 5)
    y.write_text('learning_rate: 1\n')
    with pytest.raises(EagleNbError, match='unknown TrainConfig fields'): config_from_args(['--config', str(y), '--store', 's', '--out', 'o'])
    with pytest.raises(EagleNbError, match='not a hidden-state store'):
        train(TrainConfig(store=str(tmp_path/'nope'), out=str(tmp_path/'o')))


def _skip_rows_agrees(samples, steps=4):
    "TTTObjective with and without row skipping on one batch of `samples`: the rows path is taken, same loss/CE/gradients."
    st, dr, head, t2d, ids = _setup(steps)
    b = prepare_batch([st.get(i) for i in samples], steps, head, t2d, len(ids), 4096, torch.device('cpu'), torch.float32)
    assert b.input_ids.shape[0] == len(samples)
    w = (torch.tensor([0.8 ** i for i in range(steps)]) / b.counts.clamp_min(1)).float()
    out, calls = {}, []
    rows_path = dr._forward_ttt_rows
    dr._forward_ttt_rows = lambda *a: calls.append(1) or rows_path(*a)
    for skip in (False, True):
        dr.zero_grad()
        loss, ce, ok = TTTObjective(dr, steps, chunk=64, skip_rows=skip)(b, w)
        loss.backward()
        out[skip] = loss.item(), ce.detach(), {n: p.grad.clone() for n, p in dr.named_parameters() if p.grad is not None}
    assert calls == [1], 'skip_rows=True must take the rows path on this batch, and only then'
    assert abs(out[True][0] - out[False][0]) < 1e-5 and torch.allclose(out[True][1], out[False][1], atol=1e-5)
    for n, g in out[False][2].items():
        assert torch.allclose(out[True][2][n], g, atol=1e-6, rtol=1e-4), n

def _most_prompt_rows(k):
    "The ids of the k smoke-store samples with the most rows without loss."
    st = HiddenStateStore.open(smoke_store())
    rows = lambda i: (m := st.get(i)['loss_mask'].float()).numel() - float(m.sum())
    return sorted(st.sample_ids, key=rows)[-k:]

def test_skipping_rows_leaves_loss_and_gradients_unchanged():
    "TTTObjective's row skipping (steps >= 1 compute only rows with loss there or later) is the same loss, less work."
    (i,) = _most_prompt_rows(1)
    m = HiddenStateStore.open(smoke_store()).get(i)['loss_mask'].float()
    assert 0 < m.mean() < 0.8, 'the smoke store needs a sample with prompt rows'
    _skip_rows_agrees([i])


def test_skipping_rows_in_a_batch_leaves_loss_and_gradients_unchanged():
    "Row skipping with several windows a step (right padded): the same loss, CE and gradients as the full unroll."
    ids = _most_prompt_rows(3)
    st = HiddenStateStore.open(smoke_store())
    assert len({len(st.get(i)['input_ids']) for i in ids}) > 1, 'the batch should need right padding'
    _skip_rows_agrees(ids)

def test_bucketed_shapes_leave_loss_and_gradients_unchanged():
    "Training on CPU pads T (collate multiple=ROW_BUCKET) and GEMM rows to multiples of 64: the same loss, CE, gradients."
    from eagle_nb.drafter import ROW_BUCKET
    from eagle_nb.train import collate, teach
    steps = 4
    st, dr, head, t2d, ids = _setup(steps)
    sample = next(s for s in (st.get(i) for i in st.sample_ids) if len(s['input_ids']) % ROW_BUCKET)
    out = {}
    for multiple in (1, ROW_BUCKET):
        c = collate([sample], 4096, torch.float32, multiple=multiple)
        assert c['input_ids'].shape[1] % multiple == 0 and c['attention_mask'].sum() == len(sample['input_ids'])
        b = teach(c, steps, head, t2d, len(ids), torch.device('cpu'))
        w = (torch.tensor([0.8 ** i for i in range(steps)]) / b.counts.clamp_min(1)).float()
        dr.zero_grad()
        loss, ce, ok = TTTObjective(dr, steps, chunk=64)(b, w)
        loss.backward()
        out[multiple] = loss.item(), ce.detach(), ok, {n: p.grad.clone() for n, p in dr.named_parameters() if p.grad is not None}
    assert out[ROW_BUCKET][0] != 0 and abs(out[ROW_BUCKET][0] - out[1][0]) < 1e-5
    assert torch.allclose(out[ROW_BUCKET][1], out[1][1], atol=1e-5) and torch.equal(out[ROW_BUCKET][2], out[1][2])
    assert out[1][3].keys() == out[ROW_BUCKET][3].keys()
    for n, g in out[1][3].items():
        assert torch.allclose(out[ROW_BUCKET][3][n], g, atol=1e-6, rtol=1e-4), n

def test_known_membership_skips_the_non_draft_head_and_leaves_training_bit_identical(tmp_path, monkeypatch):
    "From the 2nd epoch on the teacher reuses each sample's 'argmax is a draft token' bits: the same weights, less work."
    store = smoke_store()
    cfg = lambda out: TrainConfig(store=store, out=str(tmp_path/out), epochs=2, ttt_steps=2, batch_tokens=256, max_len=256,
                                  eval_fraction=0.1, draft_vocab_size=60, compile=False, lr=1e-2)   # 60 of 256 tokens: many argmaxes outside
    calls = {'full': 0, 'known': 0}
    real = TargetHead.distribution
    def counted(self, final, in_draft=None):
        calls['known' if in_draft is not None else 'full'] += 1
        return real(self, final, in_draft)
    monkeypatch.setattr(TargetHead, 'distribution', counted)
    r = train(cfg('cached'))
    per_epoch = r.steps // 2
    assert calls['known'] == per_epoch and calls['full'] < 2 * per_epoch, calls   # epoch 2 from the bits; epoch 1 and the held out: full
    monkeypatch.setattr(TargetHead, 'distribution', lambda self, final, in_draft=None: real(self, final))   # always the full head
    train(cfg('full'))
    from train_helpers import load_weights, metrics
    a, b = load_weights(tmp_path/'cached'), load_weights(tmp_path/'full')
    for k in a: assert torch.equal(a[k], b[k]), k
    losses = lambda out: [x['loss'] for x in metrics(tmp_path/out) if x['kind'] == 'train']
    assert losses('cached') == losses('full')


def test_profile_steps_writes_where_a_step_goes(tmp_path):
    "--profile-steps N: out/profile.txt names N profiled steps (after the first) and the ops by self CPU time; fewer steps left is fine."
    from train_helpers import smoke_store, train_cli
    store = smoke_store()
    base = ['--store', store, '--ttt-steps', '2', '--batch-tokens', '256', '--max-len', '96', '--no-compile',
            '--eval-samples', '2', '--no-resume', '--draft-vocab-size', '256']
    train_cli([*base, '--steps', '4', '--profile-steps', '2', '--out', str(tmp_path/'a')])
    text = (tmp_path/'a'/'profile.txt').read_text()
    assert text.startswith('# eagle-nb train --profile-steps: 2 step(s) on cpu') and '## by self CPU time' in text
    assert 'aten::' in text and 'by self device time' not in text          # CPU run: no device table
    train_cli([*base, '--steps', '2', '--profile-steps', '5', '--out', str(tmp_path/'b')])   # 1 step after the warm-up one
    assert (tmp_path/'b'/'profile.txt').read_text().startswith('# eagle-nb train --profile-steps: 1 step(s)')
    # a run without --profile-steps writes none: test_train_resume's reference run (a third run here cost ~20 s loaded)


def test_a_profiler_that_cannot_start_does_not_stop_training(monkeypatch, capsys):
    "Profiling is a by-product: where torch.profiler cannot start (no CUPTI, say) training goes on and says why."
    import torch.profiler
    from eagle_nb.train import StepProfile
    def refuse(*a, **k): raise RuntimeError('CUPTI unavailable')
    monkeypatch.setattr(torch.profiler, 'profile', refuse)
    assert StepProfile.start(torch.device('cpu'), 2) is None
    assert 'eagle-nb train --profile-steps: the profiler did not start (RuntimeError: CUPTI unavailable)' in capsys.readouterr().err
