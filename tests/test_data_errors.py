"""Bad input to eagle_nb.data gets a clear answer: each case names its reason code and exact location
(file:line, file:byte or sample id); `on_error='raise'` stops with that, `on_error='skip'` counts it."""
import gzip, json
from pathlib import Path
import pytest
from eagle_nb.core import EagleNbError
from eagle_nb.data import (DataError, Conversation, load_conversations, tokenize_conversation, tokenize_conversations,
                           prepare_main)
from eagle_nb.target import tiny_tokenizer

GOOD = {'id': 'good', 'conversations': [{'from': 'human', 'value': 'Hi'}, {'from': 'gpt', 'value': 'Hello!'}]}
def conv(*turns, **extra): return {**extra, 'conversations': [{'from': r, 'value': v} for r, v in turns]}

# (case id, bad JSONL line as an object or raw bytes, reason). The bad record is on line 2, after a good one.
RECORD_CASES = [
    ('invalid_json',        b'{"conversations": [oops]}',                                  'invalid_json'),
    ('not_utf8_line',       b'{"id": "x", "conversations": "\xff\xfe"}',                   'not_utf8'),
    ('record_is_list',      [1, 2],                                                        'record_not_object'),
    ('record_is_string',    "just text",                                                   'record_not_object'),
    ('no_messages_key',     {'id': 'x', 'text': 'hello'},                                  'missing_messages'),
    ('messages_is_string',  {'messages': 'hello'},                                         'messages_not_list'),
    ('conversations_dict',  {'conversations': {'from': 'human', 'value': 'x'}},            'messages_not_list'),
    ('empty_list',          {'messages': []},                                              'empty_conversation'),
    ('all_turns_empty',     conv(('human', ''), ('gpt', '  \n')),                         'empty_conversation'),
    ('message_is_string',   {'messages': ['hello', 'world']},                              'message_not_object'),
    ('missing_role',        {'messages': [{'content': 'x'}]},                              'missing_role'),
    ('role_is_int',         {'messages': [{'role': 1, 'content': 'x'}]},                   'role_not_string'),
    ('unknown_role_tool',   {'messages': [{'role': 'user', 'content': 'x'}, {'role': 'tool', 'content': '{}'}]}, 'unknown_role'),
    ('unknown_role_typo',   conv(('humen', 'x'), ('gpt', 'y')),                           'unknown_role'),
    ('missing_content',     {'messages': [{'role': 'user'}]},                              'missing_content'),
    ('content_is_int',      {'messages': [{'role': 'user', 'content': 42}]},               'content_not_string'),
    ('content_is_null',     {'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': None}]}, 'content_not_string'),
    ('content_image_part',  {'messages': [{'role': 'user', 'content': [{'type': 'image_url', 'image_url': {'url': 'x'}}]}]}, 'content_not_string'),
    ('id_is_list',          conv(('human', 'x'), ('gpt', 'y'), id=['a']),                 'id_not_string'),
    ('system_in_middle',    conv(('human', 'x'), ('system', 'be nice'), ('gpt', 'y')),   'system_not_first'),
    ('only_user',           conv(('human', 'a question')),                                 'no_assistant_turn'),
    ('only_assistant',      conv(('gpt', 'an answer without a question')),                 'no_assistant_turn'),
    ('system_and_user',     conv(('system', 'rules'), ('human', 'x')),                    'no_assistant_turn'),
]

def _line(obj) -> bytes: return obj if isinstance(obj, bytes) else json.dumps(obj).encode()

@pytest.mark.parametrize('name,bad,reason', RECORD_CASES, ids=[c[0] for c in RECORD_CASES])
def test_record_error_raise_and_skip(tmp_path, name, bad, reason):
    p = tmp_path/'data.jsonl'
    p.write_bytes(_line(GOOD) + b'\n' + _line(bad) + b'\n' + _line(dict(GOOD, id='good2')) + b'\n')
    with pytest.raises(DataError) as ei: load_conversations(p)
    e = ei.value
    assert (e.reason, e.location) == (reason, f'{p}:2')
    msg = str(e)
    assert msg.startswith(f'{p}:2: ') and f'[{reason}]' in msg and '\n' not in msg and "on_error='skip'" in msg
    convs, rep = load_conversations(p, on_error='skip')
    assert [c.id for c in convs] == ['good', 'good2']
    assert rep.skipped == {reason: 1} and rep.examples[reason] == [f'{p}:2']
    assert rep.loaded + sum(rep.skipped.values()) == rep.items == 3

# The same record problems inside a JSON array are located by the line where the record starts.
@pytest.mark.parametrize('name,bad,reason', [c for c in RECORD_CASES if not isinstance(c[1], bytes)],
                         ids=[c[0] for c in RECORD_CASES if not isinstance(c[1], bytes)])
def test_record_error_in_json_array(tmp_path, name, bad, reason):
    p = tmp_path/'data.json'
    p.write_text('[\n' + json.dumps(GOOD) + ',\n' + json.dumps(bad) + ',\n' + json.dumps(dict(GOOD, id='good2')) + '\n]\n')
    bad_line = 3
    with pytest.raises(DataError) as ei: load_conversations(p)
    assert (ei.value.reason, ei.value.location) == (reason, f'{p}:{bad_line}')
    convs, rep = load_conversations(p, on_error='skip')
    assert [c.id for c in convs] == ['good', 'good2'] and rep.skipped == {reason: 1}

# File-level problems raise whatever on_error says: there is nothing to skip to.
def _mk_dir(p): p.mkdir(); return p
def _write(p, data: bytes): p.write_bytes(data); return p
FILE_CASES = [
    ('missing',          lambda d: d/'nope.jsonl',                                          'file_not_found'),
    ('directory',        lambda d: _mk_dir(d/'adir'),                                       'is_directory'),
    ('zero_bytes',       lambda d: _write(d/'e.jsonl', b''),                                'empty_file'),
    ('whitespace_only',  lambda d: _write(d/'w.json', b'\n  \n\t\n'),                       'empty_file'),
    ('binary',           lambda d: _write(d/'b.jsonl', b'\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR'), 'binary_file'),
    ('bad_gzip',         lambda d: _write(d/'g.jsonl.gz', b'this is not gzip data at all'), 'unreadable'),
    ('empty_array',      lambda d: _write(d/'a.json', b'[\n]\n'),                          'no_conversations'),
]

@pytest.mark.parametrize('name,make,reason', FILE_CASES, ids=[c[0] for c in FILE_CASES])
@pytest.mark.parametrize('on_error', ['raise', 'skip'])
def test_file_errors(tmp_path, name, make, reason, on_error):
    p = make(tmp_path)
    with pytest.raises(DataError) as ei: load_conversations(p, on_error=on_error)
    assert (ei.value.reason, ei.value.location) == (reason, str(p))
    assert str(ei.value).startswith(f'{p}: ') and '\n' not in str(ei.value)

def test_everything_skipped_says_why(tmp_path):
    p = tmp_path/'all_bad.jsonl'
    p.write_text(json.dumps(conv(('human', 'q'))) + '\n' + json.dumps({'messages': []}) + '\n')
    with pytest.raises(DataError) as ei: load_conversations(p, on_error='skip')
    assert ei.value.reason == 'no_conversations' and 'empty_conversation=1, no_assistant_turn=1' in str(ei.value)

def test_not_utf8_in_json_array_names_byte(tmp_path):
    p = tmp_path/'latin1.json'
    head = json.dumps([GOOD]).encode()[:-1] + b', '
    p.write_bytes(head + '{"id": "caf\xe9", "conversations": []}]'.encode('latin-1'))
    off = len(head) + len(b'{"id": "caf')
    with pytest.raises(DataError) as ei: load_conversations(p, on_error='skip')  # cannot resync inside an array
    assert (ei.value.reason, ei.value.location) == ('not_utf8', f'{p}:byte {off}')

ARRAY_CASES = [  # (name, text, reason, line): the array problems that stop the stream
    ('cut_off',        '[\n' + json.dumps(GOOD) + ',\n{"id": "x", "conversations": [{"from": "human", "val', 'truncated_json', 3),
    ('not_closed',     '[\n' + json.dumps(GOOD) + ',\n',                                                   'truncated_json', 3),
    ('missing_comma',  '[\n' + json.dumps(GOOD) + '\n' + json.dumps(GOOD) + '\n]',                        'invalid_json', 3),
    ('broken_middle',  '[\n' + json.dumps(GOOD) + ',\n{"id": "x", "conversations": [,]},\n' + json.dumps(GOOD) + '\n]', 'invalid_json', 3),
    ('trailing_data',  '[\n' + json.dumps(GOOD) + '\n]\n{"more": 1}\n',                                   'trailing_data', 4),
]

@pytest.mark.parametrize('name,text,reason,line', ARRAY_CASES, ids=[c[0] for c in ARRAY_CASES])
def test_array_stops(tmp_path, name, text, reason, line):
    p = tmp_path/'arr.json'; p.write_text(text)
    with pytest.raises(DataError) as ei: load_conversations(p)
    assert (ei.value.reason, ei.value.location) == (reason, f'{p}:{line}')
    convs, rep = load_conversations(p, on_error='skip')
    assert [c.id for c in convs] == ['good'] and rep.skipped == {reason: 1}
    assert rep.stopped_at['reason'] == reason and rep.stopped_at['line'] == line and rep.stopped_at['complete_records'] == 1

# --- problems found at tokenization, named by sample id

def test_token_out_of_vocab():
    tok = tiny_tokenizer('chatml'); V = len(tok); tok.add_tokens(['<|tool_call|>'])
    c = Conversation('s-17', [{'role': 'user', 'content': 'go'}, {'role': 'assistant', 'content': 'ok <|tool_call|>'}])
    with pytest.raises(DataError) as ei: tokenize_conversation(c, tok, V)
    assert (ei.value.reason, ei.value.location) == ('token_out_of_vocab', 'sample s-17')
    assert f'token id {V} at position' in str(ei.value)
    skipped, examples = {}, {}
    ok = Conversation('s-18', [{'role': 'user', 'content': 'go'}, {'role': 'assistant', 'content': 'ok'}])
    out = tokenize_conversations([c, ok], tok, V, on_error='skip', skipped=skipped, examples=examples)
    assert [s['id'] for s in out] == ['s-18'] and skipped == {'token_out_of_vocab': 1} and examples['token_out_of_vocab'] == ['sample s-17']

def test_template_rewrites_content():
    tok = tiny_tokenizer('chatml')
    tok.chat_template = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] | upper + '\n' }}{% endfor %}"
    c = Conversation('s-3', [{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'yo'}])
    with pytest.raises(DataError) as ei: tokenize_conversation(c, tok)
    assert (ei.value.reason, ei.value.location) == ('template_mismatch', 'sample s-3')

def test_template_raises():
    tok = tiny_tokenizer('chatml')
    tok.chat_template = "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}{{ m['content'] }}{% endfor %}"
    c = Conversation('s-4', [{'role': 'system', 'content': 's'}, {'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'yo'}])
    with pytest.raises(DataError) as ei: tokenize_conversation(c, tok)
    assert (ei.value.reason, ei.value.location) == ('template_error', 'sample s-4') and 'no system role' in str(ei.value)

# --- the command line: one line, exit 2

def _cli(argv, capsys):
    from eagle_nb.cli import main
    rc = main(['prepare'] + argv)
    err = capsys.readouterr().err.strip()
    return rc, err

@pytest.mark.parametrize('extra,needle', [
    (['--max-len', '0'], 'max_len=0'),
    (['--draft-vocab', '100000'], 'draft vocabulary size 100000'),
    (['--holdout', 'abc'], "--holdout 'abc'"),
    (['--holdout', '5'], 'leaving none to train on'),
    (['--target', '/no/such/model'], 'not a registered name'),
], ids=['max_len', 'draft_vocab', 'holdout_text', 'holdout_all', 'target'])
def test_cli_bad_options(tmp_path, capsys, extra, needle):
    p = tmp_path/'ok.jsonl'; p.write_text(json.dumps(GOOD) + '\n' + json.dumps(dict(GOOD, id='g2')) + '\n')
    rc, err = _cli(['--data', str(p), '--target', 'tiny-llama', '--out', str(tmp_path/'o')] + extra, capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith('eagle-nb prepare: error: ') and needle in err, err

def test_cli_bad_record_and_skip(tmp_path, capsys):
    p = tmp_path/'d.jsonl'
    p.write_text(json.dumps(GOOD) + '\n' + json.dumps(conv(('human', 'x'), ('tool', 'y'))) + '\n')
    rc, err = _cli(['--data', str(p), '--target', 'tiny-llama', '--out', str(tmp_path/'o')], capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and f'{p}:2: message 1: unknown role' in err and '--on-error skip' in err
    rc, _ = _cli(['--data', str(p), '--target', 'tiny-llama', '--on-error', 'skip', '--out', str(tmp_path/'o')], capsys)
    assert rc == 0 and (tmp_path/'o'/'manifest.json').exists()
    m = json.loads((tmp_path/'o'/'manifest.json').read_text())
    assert m['reports']['load']['skipped'] == {'unknown_role': 1} and m['num_samples'] == 1

def test_cli_missing_file(tmp_path, capsys):
    rc, err = _cli(['--data', str(tmp_path/'none.jsonl'), '--target', 'tiny-llama', '--out', str(tmp_path/'o')], capsys)
    assert rc == 2 and err == f"eagle-nb prepare: error: {tmp_path/'none.jsonl'}: no such file; pass 'sharegpt' or the path of a .json/.jsonl file [file_not_found]"

def test_all_samples_too_long_for_drop(tmp_path):
    from eagle_nb.data import prepare_dataset
    from eagle_nb.target import tiny_target
    p = tmp_path/'d.jsonl'; p.write_text(json.dumps(conv(('human', 'x ' * 50), ('gpt', 'y ' * 50))) + '\n')
    with pytest.raises(EagleNbError, match="nothing to train on after tokenization and the 'drop' policy at max_len 16"):
        prepare_dataset(p, tiny_target('llama'), tmp_path/'o', max_len=16, policy='drop')
