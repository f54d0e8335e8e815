"""Loss masks on every tiny target (three template families), length policies and the on-disk round trip."""
import json, random
import numpy as np
import pytest, torch
from eagle_nb.data import (Conversation, tokenize_conversation, tokenize_conversations, masked_spans, apply_length_policy,
                           prepare_dataset, TokenizedDataset, masked_token_counts, build_draft_vocab, truncation_loss)
from eagle_nb.target import tiny_target

EOT = {'llama': '<|eot_id|>', 'qwen2': '<|im_end|>', 'qwen3': '<|im_end|>', 'deepseek_v3': '<|end_of_sentence|>'}
PIECES = ['Hello', ' world', '\n', '  indented', 'def f(x):\n    return x', 'naïve café', '東京', '🙂', '"quoted"', '<b>html</b>',
          'user', 'assistant', '\n\n', 'x' * 40, ' trailing ', '1+1=2', '\t']

def random_conv(rng, i, system=None):
    msgs = [{'role': 'system', 'content': 'You are helpful.'}] if (rng.random() < .4 if system is None else system) else []
    for _ in range(rng.randint(1, 4)):
        for role in ('user', 'assistant'):
            text = ''.join(rng.choice(PIECES) for _ in range(rng.randint(1, 6)))
            msgs.append({'role': role, 'content': text if text.strip() else 'x'})
    return Conversation(f'c{i}', msgs)

@pytest.fixture(scope='module', params=list(EOT))
def target(request): return tiny_target(request.param)

def test_masks_decode_back_exactly(target):
    rng = random.Random(0)
    tok, eot = target.tokenizer, EOT[target.name[5:]]
    convs = [random_conv(rng, i) for i in range(40)]
    samples = tokenize_conversations(convs, tok, target.vocab_size)
    for c, s in zip(convs, samples):
        want = [m['content'] + eot for m in c.messages if m['role'] == 'assistant']
        assert masked_spans(s, tok) == want, c.id
        assert tok.decode(s['input_ids'], skip_special_tokens=False) == tok.apply_chat_template(c.messages, tokenize=False)
        assert len(s['input_ids']) == len(s['loss_mask']) and s['missing_eot'] == 0
        assert max(s['input_ids']) < target.vocab_size
        # batched and single tokenization agree
        assert tokenize_conversation(c, tok, target.vocab_size)['input_ids'] == s['input_ids']

def test_user_text_that_looks_like_a_header(target):
    """Content equal to role names or template words must not be found inside the template text."""
    tok, eot = target.tokenizer, EOT[target.name[5:]]
    c = Conversation('tricky', [{'role': 'user', 'content': 'user'}, {'role': 'assistant', 'content': 'assistant'},
                                {'role': 'user', 'content': '\n'}, {'role': 'assistant', 'content': 'user'}])
    assert masked_spans(tokenize_conversation(c, tok), tok) == ['assistant' + eot, 'user' + eot]

@pytest.mark.parametrize('policy', ['truncate', 'split', 'drop'])
def test_length_policies_keep_invariants(target, policy):
    rng = random.Random(1)
    tok = target.tokenizer
    convs = [random_conv(rng, i, system=i % 2 == 0) for i in range(30)]
    samples = tokenize_conversations(convs, tok)
    max_len = int(np.percentile([len(s['input_ids']) for s in samples], 50))
    out, r = apply_length_policy(samples, max_len, policy, {c.id: c for c in convs}, tok)
    assert all(len(s['input_ids']) <= max_len and len(s['input_ids']) == len(s['loss_mask']) and any(s['loss_mask']) for s in out)
    assert len({s['id'] for s in out}) == len(out)
    assert r['samples_out'] == len(out) and r['tokens_out'] == sum(len(s['input_ids']) for s in out)
    assert r['loss_tokens_in'] - r['loss_tokens_lost'] == r['loss_tokens_out']
    assert r['samples_over'] == sum(len(s['input_ids']) > max_len for s in samples) > 0
    if policy == 'split':
        eot = EOT[target.name[5:]]
        by = {c.id: c for c in convs}
        for w in out:
            if w['id'] in by: continue
            base = by[w['id'].split('#')[0]]
            # every window renders as a conversation of its own, starting like the original (BOS, system prompt)
            first = tok.apply_chat_template(base.messages[:1], tokenize=False)[:10]
            assert tok.decode(w['input_ids'], skip_special_tokens=False).startswith(first)
            for span in masked_spans(w, tok):  # answers are whole unless the window had to be truncated
                assert span.endswith(eot) or len(w['input_ids']) == max_len

def test_truncation_loss():
    r = truncation_loss([10, 20, 30, 40], 25)
    assert (r['samples_over'], r['tokens_cut'], r['frac_samples_over']) == (2, 20, 0.5)
    assert abs(r['frac_tokens_cut'] - 20 / 100) < 1e-12

def test_prepare_round_trip(tmp_path):
    rng = random.Random(2)
    convs = [random_conv(rng, i) for i in range(30)]
    src = tmp_path/'convs.jsonl'
    src.write_text(''.join(json.dumps({'id': c.id, 'messages': c.messages}) + '\n' for c in convs))
    t = tiny_target('qwen3')
    r = prepare_dataset(src, t, tmp_path/'ds', max_len=96, policy='split', draft_vocab_size=100, holdout=0.2, seed=3)
    ds = TokenizedDataset.open(tmp_path/'ds')
    m = ds.manifest
    assert (m['format'], m['version'], m['max_len'], m['policy']) == ('eagle_nb.tokenized', 1, 96, 'split')
    assert m['target'] == t.describe() and m['tokenizer']['end_of_turn'] == ['<|im_end|>']
    assert len(ds) == r.samples == m['num_samples'] and sum(ds.lengths) == r.tokens == ds.input_ids.numel()
    held = {c.id for c in ds.heldout()}
    assert len(held) == 6 and held == set(m['heldout']['ids'])
    assert not held & {i.split('#')[0] for i in ds.ids}
    # samples on disk are exactly the tokenization of the training conversations (+ policy)
    train = [c for c in convs if c.id not in held]
    want, _ = apply_length_policy(tokenize_conversations(train, t.tokenizer, t.vocab_size), 96, 'split', {c.id: c for c in train}, t.tokenizer)
    assert ds.ids == [s['id'] for s in want]
    for s, w in zip(ds, want):
        assert s['input_ids'].tolist() == w['input_ids'] and s['loss_mask'].tolist() == w['loss_mask']
        assert s['input_ids'].dtype == torch.int64 and s['loss_mask'].dtype == torch.uint8
    # the draft vocabulary comes from the masked training tokens only
    dv = ds.draft_vocab()
    ref = build_draft_vocab(masked_token_counts(want, t.vocab_size), 100)
    assert torch.equal(dv.token_ids, ref.token_ids) and torch.equal(dv.d2t, ref.token_ids - torch.arange(100))
    assert dv.d2t.dtype == torch.int64 and dv.t2d.dtype == torch.bool and int(dv.t2d.sum()) == 100
    assert torch.equal(dv.to_target(torch.arange(100)), dv.token_ids)
    assert abs(dv.coverage - r.draft_coverage) < 1e-12 and m['draft_vocab']['coverage'] == r.draft_coverage
    # manifest offsets agree with the tokens file; no temp files left behind
    assert [s['offset'] for s in m['samples']] == ds.offsets[:-1].tolist()
    assert sorted(p.name for p in (tmp_path/'ds').iterdir()) == ['draft_vocab.safetensors', 'heldout.jsonl', 'manifest.json', 'tokens.safetensors']
    # re-preparing into the same directory replaces it atomically and stays readable
    prepare_dataset(src, t, tmp_path/'ds', max_len=64, policy='truncate', draft_vocab_size=50)
    ds2 = TokenizedDataset.open(tmp_path/'ds')
    assert ds2.manifest['max_len'] == 64 and len(ds2.heldout()) == 0 and ds2.draft_vocab().size == 50

def test_open_refuses_broken_datasets(tmp_path):
    from eagle_nb.core import EagleNbError
    with pytest.raises(EagleNbError, match='not a prepared dataset'): TokenizedDataset.open(tmp_path)
    rng = random.Random(4)
    src = tmp_path/'c.jsonl'
    src.write_text(''.join(json.dumps(random_conv(rng, i).to_json()) + '\n' for i in range(5)))
    prepare_dataset(src, tiny_target('llama'), tmp_path/'ds', max_len=256, draft_vocab_size=20)
    (tmp_path/'ds'/'draft_vocab.safetensors').unlink()
    with pytest.raises(EagleNbError, match='draft_vocab.safetensors: missing'): TokenizedDataset.open(tmp_path/'ds')
