"kill -9 in the middle of `eagle-nb regenerate`, run the same command again: the result equals an uninterrupted run."
import json, os, signal, subprocess, sys, time
from pathlib import Path

import pytest
from eagle_nb.core import EagleNbError, read_json
from eagle_nb.regenerate import partial_path, manifest_path, regenerate, regenerate_main, OpenAIBackend, RegenerateConfig
from fake_openai import FakeOpenAI

ENV = dict(os.environ, EAGLE_NB_PROGRESS='0', OMP_NUM_THREADS='1')  # one thread: tiny models, busy shared CPUs
CLI = [sys.executable, '-c', 'import sys; from eagle_nb.cli import main; sys.exit(main())', 'regenerate']


def conversations(n):
    "n conversations of 1 to 3 turns and varied lengths, some with a system message."
    words = 'the quick brown fox jumps over a lazy dog while Paris is the capital of France'.split()
    out = []
    for i in range(n):
        msgs = [{'role': 'system', 'content': 'Be brief.'}] if i % 4 == 0 else []
        for k in range(1 + i % 3):
            msgs += [{'role': 'user', 'content': ' '.join(words[(i + k) % 7:(i + k) % 7 + 2 + (i * 5 + k) % 11])},
                     {'role': 'assistant', 'content': f'answer {i}.{k}'}]
        out.append({'id': f'conv-{i}', 'messages': msgs})
    return out


def write_data(path, convs):
    path.write_text(''.join(json.dumps(c) + '\n' for c in convs))
    return path


def finished_lines(log: Path) -> list[dict]:
    "The complete lines of a progress log (the last one may be torn)."
    raw = log.read_bytes() if log.exists() else b''
    return [json.loads(l) for l in raw[:raw.rfind(b'\n') + 1].splitlines()]


def kill_midway(args, out: Path, after: int, timeout: float = 300) -> list[dict]:
    "Start the command, SIGKILL it once `after` conversations are in its log; return the log's entries."
    p = subprocess.Popen(CLI + args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + timeout
    try:
        while True:
            if p.poll() is not None: pytest.fail(f'the run ended (rc={p.returncode}) before it could be killed: {p.stderr.read().decode()[-2000:]}')
            if len(finished_lines(partial_path(out))) > after: break
            if time.time() > deadline: pytest.fail('no progress before the deadline')
            time.sleep(0.01)
    finally:
        os.kill(p.pid, signal.SIGKILL); p.wait()
    assert p.returncode == -signal.SIGKILL and not out.exists()
    return finished_lines(partial_path(out))[1:]


def check_resumed(out: Path, ref: Path, entries: list[dict], n: int):
    ids = [e['id'] for e in entries]
    assert len(ids) == len(set(ids)) > 0 and len(ids) < n  # killed midway, nothing in the log twice
    assert out.read_bytes() == ref.read_bytes()  # == an uninterrupted run
    recs = [json.loads(l) for l in out.read_text().splitlines()]
    assert [r['id'] for r in recs] == [f'conv-{i}' for i in range(n)]  # each conversation once, in order
    rep = read_json(manifest_path(out))['report']
    assert rep['resumed'] >= len(entries) and rep['written'] == n
    assert not partial_path(out).exists()


def test_kill_and_resume_hf(tmp_path):
    n = 24
    data = write_data(tmp_path/'in.jsonl', conversations(n))
    common = ['--data', str(data), '--target', 'tiny-qwen2', '--mode', 'all', '--max-new-tokens', '12', '--batch-size', '2']
    r = subprocess.run(CLI + common + ['--out', str(tmp_path/'ref.jsonl')], env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp_path/'out.jsonl'
    entries = kill_midway(common + ['--out', str(out)], out, after=4)
    r = subprocess.run(CLI + common + ['--out', str(out)], env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'resumed after' in r.stdout
    check_resumed(out, tmp_path/'ref.jsonl', entries, n)


def test_kill_and_resume_openai(tmp_path):
    n = 30
    data = write_data(tmp_path/'in.jsonl', conversations(n))
    with FakeOpenAI(delay=0.05) as srv:
        common = ['--data', str(data), '--backend', 'openai', '--url', srv.url, '--mode', 'all', '--max-new-tokens', '32',
                  '--batch-size', '2', '--concurrency', '2']
        assert regenerate_main(common + ['--out', str(tmp_path/'ref.jsonl')]) == 0
        out = tmp_path/'out.jsonl'
        entries = kill_midway(common + ['--out', str(out)], out, after=4)
        assert regenerate_main(common + ['--out', str(out)]) == 0
    check_resumed(out, tmp_path/'ref.jsonl', entries, n)


def test_a_second_run_on_the_same_output_is_refused(tmp_path):
    import fcntl
    out = tmp_path/'o.jsonl'
    with open(partial_path(out), 'ab') as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        with FakeOpenAI() as srv, pytest.raises(EagleNbError, match='another regenerate run'):
            regenerate(conversations(2), OpenAIBackend(srv.url), out, RegenerateConfig())
