"""Real data on the real default target: the cut-off ShareGPT file fully recovered, and SmolLM2's template
masking exactly the assistant text + <|im_end|> on real conversations."""
import json, time
import pytest
from eagle_nb.data import (load_conversations, sharegpt_path, tokenize_conversations, masked_spans, prepare_dataset,
                           TokenizedDataset, prepare_main)

@pytest.fixture(scope='module')
def smol():
    from eagle_nb.target import load_target
    return load_target('smollm2-135m')

@pytest.mark.slow
def test_sharegpt_cut_off_file_fully_recovered():
    p = sharegpt_path()
    assert p.stat().st_size == 125_509_632
    t0 = time.time()
    convs, rep = load_conversations('sharegpt')
    dt = time.time() - t0
    assert rep.records == 17_671 and rep.stopped_at['complete_records'] == 17_671
    assert rep.stopped_at['reason'] == 'truncated_json' and rep.skipped['truncated_json'] == 1
    # the cut-off record starts where the report says
    with open(p, 'rb') as f:
        f.seek(rep.stopped_at['byte']); assert f.read(1) == b'{'
        f.seek(0); head = f.read(rep.stopped_at['byte'])
    assert head.count(b'\n') + 1 == rep.stopped_at['line']
    assert rep.loaded + sum(rep.skipped.values()) == rep.items == 17_672
    assert rep.loaded == len(convs) > 17_000 and len({c.id for c in convs}) == len(convs)
    assert dt < 120, f'parse took {dt:.0f}s'

@pytest.mark.slow
def test_smollm2_masks_on_real_sharegpt(smol):
    convs, _ = load_conversations('sharegpt', limit=20)
    samples = tokenize_conversations(convs, smol.tokenizer, smol.vocab_size)
    assert len(samples) == 20
    for c, s in zip(convs, samples):
        assert masked_spans(s, smol.tokenizer) == [m['content'] + '<|im_end|>' for m in c.messages if m['role'] == 'assistant'], c.id
        assert max(s['input_ids']) < smol.vocab_size and s['missing_eot'] == 0
        assert smol.tokenizer.decode(s['input_ids'], skip_special_tokens=False) == smol.tokenizer.apply_chat_template(c.messages, tokenize=False)
    # a ShareGPT conversation with its own system prompt (TypingMind exports) replaces SmolLM2's default one
    sys_convs = [c for c in load_conversations('sharegpt', limit=3000)[0] if c.messages[0]['role'] == 'system'][:3]
    assert sys_convs
    for c, s in zip(sys_convs, tokenize_conversations(sys_convs, smol.tokenizer, smol.vocab_size)):
        assert masked_spans(s, smol.tokenizer) == [m['content'] + '<|im_end|>' for m in c.messages if m['role'] == 'assistant']
        assert 'named SmolLM' not in smol.tokenizer.decode(s['input_ids'])

@pytest.mark.slow
def test_cli_prepare_sharegpt_smollm2(tmp_path, capsys):
    out = tmp_path/'ds'
    assert prepare_main(['--data', 'sharegpt', '--target', 'smollm2-135m', '--max-len', '1024', '--policy', 'split',
                         '--limit', '40', '--draft-vocab', '2048', '--holdout', '4', '--out', str(out)]) == 0
    printed = capsys.readouterr().out
    assert 'draft vocab coverage' in printed and 'wrote' in printed
    ds = TokenizedDataset.open(out)
    m = ds.manifest
    assert m['target']['name'] == 'smollm2-135m' and m['target']['vocab_size'] == 49152
    assert m['tokenizer']['end_of_turn'] == ['<|im_end|>'] and m['heldout']['count'] == 4
    assert max(ds.lengths) <= 1024 and ds.draft_vocab().size == 2048
    assert ds.manifest['num_loss_tokens'] == int(ds.loss_mask.sum())

@pytest.mark.slow
def test_smollm2_control_characters_do_not_fail_mask_check(smol):
    "ShareGPT's jh3EBZd_0 holds \\x13, which SmolLM2's tokenizer drops: the mask check compares with the tokenizer's round trip."
    from eagle_nb.data import Conversation, _verify_masks
    text = 'ratio\n\x12\n-1 - 2Phi\n\x131/2 done'
    assert smol.tokenizer.decode(smol.tokenizer.encode(text, add_special_tokens=False)) != text   # the tokenizer is lossy here
    conv = Conversation('cc', [{'role': 'user', 'content': 'derive it'}, {'role': 'assistant', 'content': text}])
    samples = tokenize_conversations([conv], smol.tokenizer)
    _verify_masks(samples, {'cc': conv}, smol.tokenizer)                                           # no mask_mismatch
    bad = Conversation('cc', [{'role': 'user', 'content': 'derive it'}, {'role': 'assistant', 'content': text + ' extra'}])
    with pytest.raises(Exception, match='mask'): _verify_masks(samples, {'cc': bad}, smol.tokenizer)   # a real mismatch still fails
