"""The store against a model of itself: random sample sizes, layouts, flushes, closes, aborts and resumes;
after every step what is stored reads back exactly and the store verifies."""
import random
import pytest, torch

from eagle_nb.core import EagleNbError
from eagle_nb.store import HiddenStateStore, verify_store, merge_stores, _encode_aux, _decode_aux

TGT = dict(name='toy', architecture='LlamaForCausalLM', num_layers=6, hidden_size=8, vocab_size=50, config_hash='c0ffee')


def sample(i, k):
    g = torch.Generator().manual_seed(i)
    T = int(torch.randint(1, 40, (1,), generator=g))
    return dict(sample_id=f'f{i}', input_ids=torch.randint(0, 50, (T,), generator=g), loss_mask=torch.randint(0, 2, (T,), generator=g),
                aux=torch.randn(T, 3, 8, generator=g) * 5, final=torch.randn(T, 8, generator=g),
                topk_ids=torch.randint(0, 10, (T, k), generator=g) if k else None,
                topk_logprobs=-torch.rand(T, k, generator=g) * 9 if k else None,
                target_argmax=torch.randint(0, 50, (T,), generator=g) if k else None)


@pytest.mark.parametrize('aux_dtype,topk', [('bfloat16', 0), ('float8_e4m3fn', 4)])
def test_random_ops(tmp_path, aux_dtype, topk):
    rng = random.Random(aux_dtype)
    kw = dict(target=TGT, layer_ids=[1, 3, 4], engine=dict(name='hf'), aux_dtype=aux_dtype, topk=topk,
              draft_vocab=dict(size=10, sha256='ab') if topk else None)
    committed, pending, nxt = {}, {}, 0
    s = HiddenStateStore.create(tmp_path, shard_bytes=rng.choice([1, 3000, 10**9]), **kw)
    for step in range(120):
        op = rng.random()
        if op < 0.6:
            x = sample(nxt, topk); nxt += 1
            s.add(**x); pending[x['sample_id']] = x
            if not s._buf: committed.update(pending); pending = {}      # the add flushed a shard
        elif op < 0.7: s.flush(); committed.update(pending); pending = {}
        elif op < 0.8: s.close(complete=rng.random() < 0.5); committed.update(pending); pending = {}; s = HiddenStateStore.create(tmp_path, shard_bytes=rng.choice([1, 3000, 10**9]), **kw)
        elif op < 0.9: s.abort(); pending = {}; s = HiddenStateStore.create(tmp_path, shard_bytes=rng.choice([1, 3000]), **kw)
        else:
            if committed:
                sid = rng.choice(list(committed))
                with pytest.raises(EagleNbError, match='already stored'): s.add(**committed[sid])
        r = HiddenStateStore.open(tmp_path)
        assert set(r.sample_ids) == set(committed) and len(r.sample_ids) == len(committed)
    s.close(complete=True)
    rep = verify_store(tmp_path); assert rep.ok, str(rep)
    r = HiddenStateStore.open(tmp_path)
    for sid, x in committed.items():
        got = r.get(sid)
        assert torch.equal(got['input_ids'], x['input_ids']) and torch.equal(got['loss_mask'], x['loss_mask'].to(torch.uint8))
        want = _decode_aux(_encode_aux(x['aux'], aux_dtype), aux_dtype, torch.float32).view_as(x['aux'])
        assert torch.equal(got['aux'], want)
        assert torch.equal(got['final'], x['final'].bfloat16().float())
        if topk:
            assert torch.equal(got['topk_ids'], x['topk_ids']) and torch.equal(got['target_argmax'], x['target_argmax'])
            assert torch.allclose(got['topk_logprobs'], x['topk_logprobs'], atol=1e-2)
    assert r.num_tokens == sum(len(x['input_ids']) for x in committed.values())


def test_refusals(tmp_path):
    kw = dict(target=TGT, layer_ids=[1, 3, 4], engine=dict(name='hf'))
    with pytest.raises(EagleNbError, match='target signal'): HiddenStateStore.create(tmp_path/'a', store_final=False, **kw)
    with pytest.raises(EagleNbError, match='draft_vocab'): HiddenStateStore.create(tmp_path/'a', topk=5, **kw)
    with pytest.raises(EagleNbError, match='0..6'): HiddenStateStore.create(tmp_path/'a', **{**kw, 'layer_ids': [1, 9]})
    with pytest.raises(EagleNbError, match='bf16 or fp8'): HiddenStateStore.create(tmp_path/'a', aux_dtype='int8', **kw)
    s = HiddenStateStore.create(tmp_path/'b', **kw)
    with pytest.raises(EagleNbError, match="sample 'x'.*aux"): s.add('x', [1, 2], [0, 1], torch.zeros(2, 3, 7), torch.zeros(2, 8))
    with pytest.raises(EagleNbError, match="sample 'x'.*final"): s.add('x', [1, 2], [0, 1], torch.zeros(2, 3, 8), None)
    s.add('x', [1, 2], [0, 1], torch.zeros(2, 3, 8), torch.zeros(2, 8)); s.close()
    with pytest.raises(EagleNbError, match='engine differs'): HiddenStateStore.create(tmp_path/'b', **{**kw, 'engine': dict(name='sglang')})
    with pytest.raises(EagleNbError, match='store exists'): HiddenStateStore.create(tmp_path/'b', resume=False, **kw)
    with pytest.raises(EagleNbError, match='read-only'): HiddenStateStore.open(tmp_path/'b').add('y', [1], [1], torch.zeros(1, 3, 8), torch.zeros(1, 8))
    with pytest.raises(EagleNbError, match='no manifest'): HiddenStateStore.open(tmp_path/'nothing')
    # merging refuses parts that disagree or overlap
    c = HiddenStateStore.create(tmp_path/'c', **{**kw, 'aux_dtype': 'fp8'}); c.add('z', [1], [1], torch.zeros(1, 3, 8), torch.zeros(1, 8)); c.close()
    with pytest.raises(EagleNbError, match='aux dtype differs'): merge_stores(tmp_path/'m', [tmp_path/'b', tmp_path/'c'])
    d = HiddenStateStore.create(tmp_path/'d', **kw); d.add('x', [1], [1], torch.zeros(1, 3, 8), torch.zeros(1, 8)); d.close()
    with pytest.raises(EagleNbError, match="'x' is in both"): merge_stores(tmp_path/'m', [tmp_path/'b', tmp_path/'d'])


def test_buffer_owns_its_rows(tmp_path):
    "A caller that reuses its batch tensors after add() (before the shard is written) does not change what is stored."
    s = HiddenStateStore.create(tmp_path, target=TGT, layer_ids=[1, 3, 4], engine=dict(name='hf'))
    aux, final = torch.ones(5, 3, 8, dtype=torch.bfloat16), torch.ones(5, 8, dtype=torch.bfloat16)
    ids = torch.arange(5, dtype=torch.int32)
    s.add('a', ids, torch.ones(5, dtype=torch.uint8), aux, final)
    aux.zero_(); final.zero_(); ids.zero_()
    s.close()
    got = HiddenStateStore.open(tmp_path).get('a')
    assert got['aux'].sum() == 120 and got['final'].sum() == 40 and got['input_ids'].tolist() == [0, 1, 2, 3, 4]
