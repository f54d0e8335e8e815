"""Training-time test (`Eagle3Drafter.forward_ttt`) against step-by-step KV-cache decoding, padding, gradients.

The reference `ttt_by_decoding` runs the drafter the way speculative decoding does: context rows one at a time
with the target's aux states, then a chain of own-hidden steps from each row, cropping the cache back after
each chain. forward_ttt must reproduce it to fp32 precision on several target families.
"""
import math
import pytest
import torch

from eagle_nb.core import EagleNbError
from eagle_nb.target import tiny_target
from eagle_nb.drafter import (DrafterConfig, Eagle3Drafter, ttt_by_decoding, max_ttt_error, ttt_attention,
                              vocab_map, check_vocab_map, draft_vocab_targets, count_parameters)

TOL = 2e-5  # fp32; measured ~2e-6


def make(arch, seed=0, draft_v=96, **kw):
    t = tiny_target(arch, seed=seed, **kw)
    c = DrafterConfig.from_target(t, draft_v)
    torch.manual_seed(seed)
    d = Eagle3Drafter(c, t.model.get_input_embeddings().weight).eval()
    ids = torch.randperm(c.vocab_size, generator=torch.Generator().manual_seed(seed))[:draft_v]
    d.set_vocab(*vocab_map(ids, c.vocab_size))
    # larger weights than the init so attention is far from uniform (a stronger test of the mask)
    with torch.no_grad():
        for p in d.parameters():
            if p.dim() == 2: p.mul_(8)
    return t, c, d


def inputs(c, B, T, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, c.num_aux * c.target_hidden_size, generator=g), torch.randint(0, c.vocab_size, (B, T), generator=g)


@pytest.mark.parametrize('arch', ['llama', 'qwen2', 'qwen3', 'deepseek_v3'])
def test_ttt_equals_step_by_step_decoding(arch):
    _, c, d = make(arch)
    aux, ids = inputs(c, 1, 11)
    with torch.no_grad(): ttt = d.forward_ttt(aux, ids, steps=6)
    ref = ttt_by_decoding(d, aux, ids, steps=6)
    assert len(ttt) == 6 and ttt[0].shape == (1, 11, c.hidden_size)
    assert max_ttt_error(ttt, ref) < TOL
    # the reference defines exactly rows t with t+i < T
    for i, r in enumerate(ref): assert int(torch.isnan(r[0, :, 0]).sum()) == min(i, 11)


def test_ttt_steps_beyond_length_and_one_step():
    _, c, d = make('llama')
    aux, ids = inputs(c, 1, 4)
    with torch.no_grad(): ttt = d.forward_ttt(aux, ids, steps=7)   # steps > T: rows past the end use pad ids
    assert len(ttt) == 7 and all(torch.isfinite(h).all() for h in ttt)
    assert max_ttt_error(ttt, ttt_by_decoding(d, aux, ids, steps=7)) < TOL
    with torch.no_grad(): assert len(d.forward_ttt(aux, ids, steps=1)) == 1


@pytest.mark.parametrize('arch', ['llama', 'qwen3'])
def test_ttt_right_padding_matches_unpadded(arch):
    "A right-padded batch gives, on real rows, exactly the per-sequence decode results."
    _, c, d = make(arch, seed=3)
    lengths, T = [12, 7, 3], 12
    aux, ids = inputs(c, len(lengths), T, seed=5)
    mask = torch.zeros(len(lengths), T, dtype=torch.long)
    for b, n in enumerate(lengths): mask[b, :n] = 1; ids[b, n:] = c.pad_token_id; aux[b, n:] = 0
    with torch.no_grad(): ttt = d.forward_ttt(aux, ids, steps=5, attention_mask=mask)
    for b, n in enumerate(lengths):
        ref = ttt_by_decoding(d, aux[b:b+1, :n], ids[b:b+1, :n], steps=5)
        assert max_ttt_error([h[b:b+1, :n] for h in ttt], ref) < TOL


def test_ttt_left_padding_uses_explicit_mask():
    "Left padding takes the explicit-mask path; rope is relative, so real rows match the unpadded sequence."
    _, c, d = make('qwen2', seed=4)
    n, T = 6, 10
    aux, ids = inputs(c, 1, T, seed=7)
    mask = torch.zeros(1, T, dtype=torch.long); mask[:, T - n:] = 1
    with torch.no_grad(): ttt = d.forward_ttt(aux, ids, steps=4, attention_mask=mask)
    ref = ttt_by_decoding(d, aux[:, T - n:], ids[:, T - n:], steps=4)
    assert max_ttt_error([h[:, T - n:] for h in ttt], ref) < 1e-4


def test_multi_row_decode_equals_step0():
    "Feeding the context in chunks through the cache gives the step-0 rows of forward_ttt."
    _, c, d = make('llama', seed=2)
    aux, ids = inputs(c, 1, 9)
    with torch.no_grad():
        step0 = d.forward_ttt(aux, ids, steps=1)[0]
        cache, outs = d.new_cache(), []
        for a, b in [(0, 4), (4, 5), (5, 9)]:
            h, logits = d.decode(aux[:, a:b], ids[:, a:b], torch.arange(a, b)[None], cache, fused=False)
            outs.append(d.norm(h))
            assert logits.shape == (1, b - a, c.draft_vocab_size)
        assert len(cache) == 9
    assert (torch.cat(outs, 1) - step0).abs().max() < TOL
    cache.crop(3); assert len(cache) == 3
    with pytest.raises(ValueError): cache.crop(5)


def _brute_force_attention(q, k0, v0, dk, dv):
    B, h, T, dd = q.shape
    g = h // k0.shape[1]
    K = torch.cat([k0] + dk, 2).repeat_interleave(g, 1); V = torch.cat([v0] + dv, 2).repeat_interleave(g, 1)
    allowed = torch.cat([torch.ones(T, T).tril()] + [torch.eye(T)] * len(dk), dim=1).bool()
    s = (q @ K.transpose(-1, -2) / math.sqrt(dd)).masked_fill(~allowed, float('-inf'))
    return torch.softmax(s, -1) @ V


@pytest.mark.parametrize('n_diag', [0, 1, 4, 6])
def test_ttt_attention_forward_and_backward(n_diag):
    "The one-SDPA 'sink' formulation equals brute-force attention, values and gradients."
    g = torch.Generator().manual_seed(n_diag)
    B, h, kvh, T, dd = 2, 6, 2, 9, 16
    mk = lambda *s: (torch.randn(*s, generator=g) * 2).requires_grad_()
    q, k0, v0 = mk(B, h, T, dd), mk(B, kvh, T, dd), mk(B, kvh, T, dd)
    dk = [mk(B, kvh, T, dd) for _ in range(n_diag)]; dv = [mk(B, kvh, T, dd) for _ in range(n_diag)]
    leaves = [q, k0, v0, *dk, *dv]
    w = torch.randn(B, h, T, dd, generator=g)
    out = ttt_attention(q, k0, v0, dk, dv)
    ref = _brute_force_attention(q, k0, v0, dk, dv)
    assert (out - ref).abs().max() < 1e-5
    ga = torch.autograd.grad((out * w).sum(), leaves)
    gb = torch.autograd.grad((ref * w).sum(), leaves)
    assert max(float((a - b).abs().max()) for a, b in zip(ga, gb)) < 1e-4


def test_ttt_backward_reaches_every_parameter():
    _, c, d = make('llama')
    d.train()
    aux, ids = inputs(c, 2, 8)
    loss = sum(0.8 ** i * d.lm_head(h).logsumexp(-1).mean() for i, h in enumerate(d.forward_ttt(aux, ids, steps=3)))
    loss.backward()
    for name, p in d.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert d.embed_tokens.weight.grad is None  # the target's embedding stays frozen


def test_bf16_autocast_close_to_fp32():
    _, c, d = make('llama')
    aux, ids = inputs(c, 1, 16)
    with torch.no_grad():
        ref = d.forward_ttt(aux, ids, steps=4)
        with torch.autocast('cpu', dtype=torch.bfloat16): out = d.forward_ttt(aux, ids, steps=4)
    for a, b in zip(out, ref):
        assert a.dtype in (torch.bfloat16, torch.float32)
        rel = (a.float() - b).norm() / b.norm()
        assert rel < 0.05, float(rel)


def test_vocab_helpers():
    d2t, t2d = vocab_map([9, 2, 5], 12)
    assert d2t.tolist() == [2, 4, 7] and t2d.nonzero().flatten().tolist() == [2, 5, 9]
    check_vocab_map(d2t, t2d)
    with pytest.raises(EagleNbError): check_vocab_map(d2t, torch.zeros(12, dtype=torch.bool))
    with pytest.raises(EagleNbError): vocab_map([1, 12], 12)
    _, c, d = make('llama')
    with pytest.raises(EagleNbError, match='do not match'): d.set_vocab(d2t, t2d)
    assert d.to_target_ids(torch.arange(c.draft_vocab_size)).tolist() == d.draft_token_ids.tolist()
    assert bool(d.t2d[d.draft_token_ids].all()) and int(d.t2d.sum()) == c.draft_vocab_size
    logits = torch.randn(3, 5, c.vocab_size)
    probs, ok = draft_vocab_targets(logits, d.draft_token_ids)
    assert probs.shape == (3, 5, c.draft_vocab_size) and torch.allclose(probs.sum(-1), torch.ones(3, 5))
    assert ok.tolist() == d.t2d[logits.argmax(-1)].tolist()


def test_config_from_targets_and_errors():
    for arch in ['llama', 'qwen2', 'qwen3', 'deepseek_v3']:
        t = tiny_target(arch)
        c = DrafterConfig.from_target(t, 64)
        d = Eagle3Drafter(c, t.model.get_input_embeddings().weight)
        assert sum(p.numel() for p in d.parameters()) == count_parameters(c)
        assert c.target_config_hash == t.config_hash and c.aux_layer_ids == t.default_aux_layers()
    with pytest.raises(EagleNbError, match='does not match'):
        Eagle3Drafter(c, torch.zeros(3, 3))
    aux, ids = inputs(c, 1, 4)
    with pytest.raises(EagleNbError, match='want aux'):
        d.forward_ttt(aux[..., :10], ids)


def _spans_keep(steps, T):
    "A chat-like loss mask: two assistant spans, a lone token, nothing on the prompt turns."
    m = torch.zeros(T, dtype=torch.bool); m[5:14] = True; m[22:31] = True; m[17] = True
    return torch.stack([torch.cat([m[i:], m.new_zeros(i)]) for i in range(steps)])      # (steps, T)


def test_ttt_skipping_rows_in_a_batch_of_sequences():
    "B > 1: a position is computed when some sequence needs it; each sequence's kept rows and the gradients are unchanged."
    _, c, d = make('llama')
    steps, T = 4, 40
    aux, ids = inputs(c, 2, T)
    a = _spans_keep(steps, T)
    b = torch.zeros(steps, T, dtype=torch.bool); b[0, 30:36] = True; b[1, 30:33] = True   # another reply, later
    keep = torch.stack([a, b], dim=1)                                                       # (steps, 2, T)
    full = d.forward_ttt(aux, ids, steps)
    rows = d.forward_ttt(aux, ids, steps, keep=keep)
    for i in range(steps):
        for s in range(2):
            if keep[i, s].any(): assert (rows[i][s][keep[i, s]] - full[i][s][keep[i, s]]).abs().max() < 1e-5, (i, s)
    need = keep.any(1).flip(0).int().cumsum(0).gt(0).flip(0)                                # union over the batch
    assert rows[1][:, ~need[1]].abs().max() == 0 and rows[1][1, need[1]].abs().min() > 0    # skipped; computed for both
    params = [p for n, p in d.named_parameters() if p.requires_grad and 'lm_head' not in n]
    loss = lambda hs: sum((h[k] ** 2).sum() for h, k in zip(hs, keep))
    for x, y in zip(torch.autograd.grad(loss(full), params), torch.autograd.grad(loss(rows), params)):
        assert (x - y).abs().max() <= 1e-4 * x.abs().max() + 1e-7

@pytest.mark.parametrize('arch', ['llama', 'qwen3'])
def test_ttt_skipping_rows_equals_full_on_the_kept_rows(arch):
    "Rows no loss needs at steps >= 1 are skipped: the kept rows' outputs and the parameter gradients are unchanged."
    _, c, d = make(arch)
    steps, T = 5, 40
    aux, ids = inputs(c, 1, T)
    keep = _spans_keep(steps, T)
    full = d.forward_ttt(aux, ids, steps)
    rows = d.forward_ttt(aux, ids, steps, keep=keep[:, None])
    for i in range(steps):
        assert (rows[i][0][keep[i]] - full[i][0][keep[i]]).abs().max() < 1e-5, i
    # rows no later step needs are really skipped (zeros), so this path is not the full one in disguise
    need = keep.flip(0).int().cumsum(0).gt(0).flip(0)
    assert rows[2][0][~need[2]].abs().max() == 0 and full[2][0][~need[2]].abs().max() > 0
    params = [p for n, p in d.named_parameters() if p.requires_grad and 'lm_head' not in n]
    loss = lambda hs: sum((h[0][k] ** 2).sum() for h, k in zip(hs, keep))
    g_full = torch.autograd.grad(loss(full), params)
    g_rows = torch.autograd.grad(loss(rows), params)
    for a, b in zip(g_full, g_rows):
        assert (a - b).abs().max() <= 1e-4 * a.abs().max() + 1e-7
    # a mask that keeps nearly every row runs the full path (the rows path costs more there)
    dense = torch.ones(steps, 1, T, dtype=torch.bool)
    assert all(torch.equal(a, b) for a, b in zip(d.forward_ttt(aux, ids, steps, keep=dense), full))
    # nothing kept after step 1: later steps are zeros
    early = torch.zeros(steps, T, dtype=torch.bool); early[:2, 3:9] = True
    out = d.forward_ttt(aux, ids, steps, keep=early[:, None])
    assert out[4].abs().max() == 0 and (out[1][0][3:9] - full[1][0][3:9]).abs().max() < 1e-5


def test_gqa_sdpa_repeated_kv_heads_equal_enable_gqa():
    "gqa_sdpa's CUDA path with a mask (KV heads repeated, so the memory-efficient kernel runs) gives enable_gqa's output and gradients."
    import torch
    from eagle_nb.drafter import gqa_sdpa
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 5, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 2, 7, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    mask = torch.rand(2, 1, 5, 7, generator=g) > 0.3
    mask[..., 0] = True                                            # every query sees a key
    outs, grads = [], []
    for repeat in (False, True):
        o = gqa_sdpa(q, k, v, attn_mask=mask, scale=0.3, repeat_kv=repeat)
        (o * torch.arange(o.numel(), dtype=o.dtype).view_as(o).cos()).sum().backward()
        outs.append(o.detach()); grads.append([t.grad.clone() for t in (q, k, v)])
        for t in (q, k, v): t.grad = None
    torch.testing.assert_close(outs[0], outs[1])
    for a, b in zip(*grads): torch.testing.assert_close(a, b)
    # query head h reads KV head h // (heads / kv_heads), as enable_gqa does
    ref = torch.nn.functional.scaled_dot_product_attention(q[:, 3:4], k[:, 1:2], v[:, 1:2], attn_mask=mask, scale=0.3)
    torch.testing.assert_close(outs[1][:, 3:4], ref.detach())
