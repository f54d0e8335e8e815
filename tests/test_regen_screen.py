"`bench/regen_screen.py`'s first exchanges skip every held-out conversation and its relatives (the same prompt, other parts)."
import argparse, json, re, sys
from train_helpers import ROOT
sys.path.insert(0, str(ROOT/'bench'))
import regen_screen
from eagle_nb.data import TokenizedDataset, load_conversations, prepare_dataset

def test_first_exchanges_leave_out_heldout_relatives(tmp_path):
    prepare_dataset('sharegpt', 'tiny-llama', tmp_path/'ds', max_len=256, policy='truncate', limit=48, draft_vocab_size=64, holdout=0.1, seed=0)
    held = TokenizedDataset.open(tmp_path/'ds').heldout()
    a = argparse.Namespace(heldout_from=str(tmp_path/'ds'), target='tiny-llama', scan=120, max_prompt_tokens=320, conversations=30)
    regen_screen.first_exchanges(a, tmp_path/'orig.jsonl')
    got = [json.loads(l) for l in (tmp_path/'orig.jsonl').read_text().splitlines()]
    assert len(got) == 30 and all([m['role'] for m in r['messages']] == ['user', 'assistant'] for r in got)
    base = lambda i: re.fullmatch(r'(.+)_(\d+)', i).group(1)
    first = lambda ms: next(m['content'].strip() for m in ms if m['role'] == 'user')
    hb, hf = {base(c.id) for c in held}, {first(c.messages) for c in held}
    assert not [r['id'] for r in got if base(r['id']) in hb or first(r['messages']) in hf]
    # and there were relatives to skip among the records it read: the check above can fail
    convs = load_conversations('sharegpt', limit=120)[0]
    last = [c.id for c in convs].index(got[-1]['id'])
    assert any(base(c.id) in hb or first(c.messages) in hf for c in convs[:last] if c.id not in {h.id for h in held})


def test_clean_arms_keep_the_same_prompts_without_degenerate_answers(tmp_path):
    "--clean: the ids whose every regenerated answer passed `degenerate_reason`, and both arms cut to exactly those ids."
    turn = lambda why: {'message_index': 1, 'finish_reason': 'length' if why == 'max_tokens' else 'stop', 'degenerate': why}
    regen = [{'id': f'c{i}', 'messages': [{'role': 'user', 'content': f'q{i}'}, {'role': 'assistant', 'content': f'a{i}'}],
              'regenerated': {'turns': [turn(why)]}} for i, why in enumerate([None, 'repetition', None, 'max_tokens', None])]
    regen[4]['regenerated']['turns'].append(turn('repetition'))      # a later turn looped: the conversation goes
    regen[2]['messages'][1]['content'] = 'a line\u2028 and a paragraph\u2029 separator'   # kept raw by json.dumps(ensure_ascii=False)
    (tmp_path/'regen.jsonl').write_text(''.join(json.dumps(r, ensure_ascii=False) + '\n' for r in regen), encoding='utf-8')
    orig = [{'id': f'c{i}', 'messages': [{'role': 'user', 'content': f'q{i}'}, {'role': 'assistant', 'content': f'sharegpt {i}'}]} for i in range(5)]
    (tmp_path/'orig.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in orig))
    keep = regen_screen.clean_ids(tmp_path/'regen.jsonl')
    assert keep == ['c0', 'c2']
    assert regen_screen.write_subset(tmp_path/'orig.jsonl', keep, tmp_path/'oc.jsonl') == 2
    got = [json.loads(l) for l in (tmp_path/'oc.jsonl').read_text().splitlines()]
    assert [r['id'] for r in got] == keep and got[1]['messages'][1]['content'] == 'sharegpt 2'
    assert regen_screen.write_subset(tmp_path/'regen.jsonl', keep, tmp_path/'rc.jsonl') == 2
    got = [json.loads(l) for l in (tmp_path/'rc.jsonl').read_text(encoding='utf-8').split('\n') if l]
    assert got[1]['messages'][1]['content'] == regen[2]['messages'][1]['content']


def test_cut_loops_cuts_only_degenerate_answers(tmp_path):
    loop = "Intro text here. " + "It is a product that can be sold. " * 10
    regen = [{'id': f'c{i}', 'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': text}],
              'regenerated': {'turns': [{'message_index': 1, 'completion_tokens': ct, 'degenerate': why}]}}
             for i, (text, why, ct) in enumerate([(loop, 'repetition', 90), (loop, None, 90), ('short answer', None, 3)])]
    (tmp_path/'regen.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in regen))
    class Tok:   # one token a word: enough to count what is kept
        def __call__(self, text, add_special_tokens=False): return {'input_ids': text.split()}
    stats = regen_screen.cut_loops(tmp_path/'regen.jsonl', tmp_path/'cut.jsonl', Tok())
    got = [json.loads(l) for l in (tmp_path/'cut.jsonl').read_text().splitlines()]
    assert got[0]['messages'][1]['content'] == "Intro text here. It is a product that can be sold."
    assert got[0]['regenerated']['turns'][0]['kept_tokens'] == 11
    assert got[0]['regenerated']['turns'][0]['cut_at_loop'] == len(got[0]['messages'][1]['content']) + 1   # the space before the loop
    assert got[1]['messages'][1]['content'] == loop and got[2]['messages'][1]['content'] == 'short answer'   # not flagged: kept whole
    assert stats == dict(answers_cut=1, completion_tokens=183, kept_tokens=11 + 90 + 3)
