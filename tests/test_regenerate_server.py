"Regeneration through OpenAI-compatible servers: a fake server over real HTTP, faults, several URLs, equality with hf."
import json, socket, time
from pathlib import Path

import pytest, torch
from eagle_nb.core import EagleNbError
from eagle_nb.regenerate import (HFBackend, OpenAIBackend, RegenerateConfig, regenerate, regenerate_main, partial_path, turn_seed)
from fake_openai import FakeOpenAI, FAULTS, echo_answer, hf_answerer
from test_regenerate_hf import CONVS, U, lines

FAST = dict(backoff=0.01, timeout=5.0)


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def expected_echo(convs, mode, max_tokens):
    "The conversations the echo server must produce, computed without HTTP (every user turn of CONVS is answered)."
    def answer(msgs): return {'role': 'assistant', 'content': echo_answer(msgs, max_tokens, 0, 1, 0)[0]}
    out = []
    for c in convs:
        src = c['messages']
        if mode == 'last':
            last = max(i for i, m in enumerate(src) if m['role'] == 'user')
            msgs = [dict(m) for m in src[:last + 1]]
            msgs.append(answer(msgs))
        else:
            msgs = []
            for m in src:
                if m['role'] == 'assistant': continue  # the originals are replaced
                msgs.append(dict(m))
                if m['role'] == 'user': msgs.append(answer(msgs))
        out.append(msgs)
    return out


@pytest.mark.parametrize('mode', ['last', 'all'])
def test_echo_server_gives_the_expected_dataset(tmp_path, mode):
    with FakeOpenAI() as srv:
        rep = regenerate(CONVS, OpenAIBackend(srv.url, **FAST), tmp_path/'o.jsonl', RegenerateConfig(mode=mode, max_new_tokens=64, batch_size=2))
    recs = lines(tmp_path/'o.jsonl')
    assert [r['messages'] for r in recs] == expected_echo(CONVS, mode, 64)
    assert [r['id'] for r in recs] == [c['id'] for c in CONVS]
    reg = recs[0]['regenerated']
    assert (reg['target'], reg['backend'], reg['mode'], reg['target_config_hash']) == ('fake-model', 'openai', mode, None)
    assert rep.written == 5 and rep.turns == (8 if mode == 'all' else 5)
    # what went over the wire: model, messages, the per-turn seed, sampling settings
    b = srv.bodies[0]
    assert b['model'] == 'fake-model' and b['max_tokens'] == 64 and b['temperature'] == 0.0 and b['stream'] is False
    seeds = {turn_seed(0, c['id'], k) for c in CONVS for k in range(3)}
    assert all(x['seed'] in seeds for x in srv.bodies)


def test_server_answers_equal_the_in_process_backend(tmp_path):
    "A server running the same tiny target writes the same dataset as the hf backend (greedy)."
    from eagle_nb.target import tiny_target
    t = tiny_target('llama')
    cfg = RegenerateConfig(mode='all', max_new_tokens=8, batch_size=3)
    regenerate(CONVS, HFBackend(t), tmp_path/'hf.jsonl', cfg)
    with FakeOpenAI(hf_answerer(t), model='tiny') as srv:
        regenerate(CONVS, OpenAIBackend(srv.url, concurrency=3, **FAST), tmp_path/'srv.jsonl', cfg)
    assert [r['messages'] for r in lines(tmp_path/'srv.jsonl')] == [r['messages'] for r in lines(tmp_path/'hf.jsonl')]
    assert [[t['finish_reason'] for t in r['regenerated']['turns']] for r in lines(tmp_path/'srv.jsonl')] == \
           [[t['finish_reason'] for t in r['regenerated']['turns']] for r in lines(tmp_path/'hf.jsonl')]


def test_faults_are_retried_and_change_nothing(tmp_path):
    cfg = RegenerateConfig(mode='all', max_new_tokens=32, batch_size=2)
    with FakeOpenAI() as srv:
        regenerate(CONVS, OpenAIBackend(srv.url, **FAST), tmp_path/'ref.jsonl', cfg)
    faults = [f for f in FAULTS if f != '400']  # 5xx, 429, timeout, truncated body, reset connection, broken JSON
    with FakeOpenAI(faults=faults) as srv:   # the 'timeout' fault hangs until the server stops: 3 s is only the client's patience
        backend = OpenAIBackend(srv.url, concurrency=3, backoff=0.01, timeout=3.0)
        rep = regenerate(CONVS, backend, tmp_path/'o.jsonl', cfg)
    assert (tmp_path/'o.jsonl').read_bytes() == (tmp_path/'ref.jsonl').read_bytes()
    assert all(srv.counts[f] == 1 for f in faults) and srv.counts['ok'] == 8
    assert backend.stats['retries'] == len(faults)
    assert {'HTTP 500', 'HTTP 429', 'TimeoutError', 'IncompleteRead', 'invalid JSON'} <= set(backend.stats['errors'])
    assert rep.written == 5


def test_rejected_requests_are_counted_not_retried(tmp_path):
    with FakeOpenAI(faults=['400']) as srv:
        rep = regenerate(CONVS[1:2] + CONVS[4:], OpenAIBackend(srv.url, concurrency=1, **FAST), tmp_path/'o.jsonl', RegenerateConfig())
    assert rep.skipped == {'rejected': 1} and rep.written == 1 and srv.counts == {'400': 1, 'ok': 1}


def _dead_url():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
    return f'http://127.0.0.1:{port}'


def test_several_servers_share_the_work_and_a_dead_one_is_skipped(tmp_path):
    cfg = RegenerateConfig(mode='all', max_new_tokens=16)
    with FakeOpenAI(delay=0.05) as a, FakeOpenAI(delay=0.05) as b:
        backend = OpenAIBackend([a.url, _dead_url(), b.url], concurrency=2, **FAST)
        rep = regenerate(CONVS, backend, tmp_path/'o.jsonl', cfg)
    assert rep.written == 5 and a.counts['ok'] > 0 and b.counts['ok'] > 0 and a.counts['ok'] + b.counts['ok'] == 8
    assert backend.stats['errors'].get('ConnectionRefusedError', 0) > 0
    assert [r['messages'] for r in lines(tmp_path/'o.jsonl')] == expected_echo(CONVS, 'all', 16)


def test_requests_are_in_flight_together(tmp_path):
    convs = [dict(id=f'c{i}', messages=[U(f'question {i}'), {'role': 'assistant', 'content': 'a'}]) for i in range(12)]
    with FakeOpenAI(delay=0.3) as srv:
        t0 = time.time()
        regenerate(convs, OpenAIBackend(srv.url, concurrency=6, **FAST), tmp_path/'o.jsonl', RegenerateConfig())
        took = time.time() - t0
    assert srv.max_in_flight >= 4 and took < 12 * 0.3


def test_retries_exhausted_stop_the_run_and_it_resumes(tmp_path):
    cfg = RegenerateConfig(mode='last', max_new_tokens=16, batch_size=1)
    with FakeOpenAI() as srv:
        regenerate(CONVS, OpenAIBackend(srv.url, **FAST), tmp_path/'ref.jsonl', cfg)
    out = tmp_path/'o.jsonl'
    # two answers, then the server stays down. Down for every attempt left, not just the failing conversation's 3: the pool's
    # one worker starts the next queued conversation as soon as one fails, and a spare answer finishing before the main thread
    # wakes would be kept (rightly) as a third answer in the log
    with FakeOpenAI(faults=[None, None] + ['503'] * 9) as srv:
        with pytest.raises(EagleNbError, match='failed 3 times.*resume'):
            regenerate(CONVS, OpenAIBackend(srv.url, concurrency=1, retries=2, **FAST), out, cfg)
    assert not out.exists() and len(partial_path(out).read_text().splitlines()) == 3  # header + the two finished
    with FakeOpenAI() as srv:
        rep = regenerate(CONVS, OpenAIBackend(srv.url, **FAST), out, cfg)
    assert rep.resumed == 2 and srv.counts['ok'] == 3
    assert out.read_bytes() == (tmp_path/'ref.jsonl').read_bytes()


def test_wrong_model_or_url_stops_at_once(tmp_path):
    with FakeOpenAI() as srv:
        with pytest.raises(EagleNbError, match='HTTP 404.*--model'):
            regenerate(CONVS, OpenAIBackend(srv.url, model='other', **FAST), tmp_path/'o.jsonl', RegenerateConfig())
    with pytest.raises(EagleNbError, match='failed 2 times'):
        OpenAIBackend(_dead_url(), retries=1, **FAST).model_id()


def test_cli_openai(tmp_path):
    src = tmp_path/'in.jsonl'
    src.write_text(''.join(json.dumps(c) + '\n' for c in CONVS))
    with FakeOpenAI(faults=['500']) as srv:
        assert regenerate_main(['--data', str(src), '--backend', 'openai', '--url', srv.url + '/v1', '--target', 'tiny-qwen2',
                                '--mode', 'all', '--max-new-tokens', '64', '--out', str(tmp_path/'o.jsonl')]) == 0
    recs = lines(tmp_path/'o.jsonl')
    assert [r['messages'] for r in recs] == expected_echo(CONVS, 'all', 64)
    from eagle_nb.target import tiny_target
    assert recs[0]['regenerated']['target'] == 'tiny-qwen2' and recs[0]['regenerated']['target_config_hash'] == tiny_target('qwen2').config_hash
