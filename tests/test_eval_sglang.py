"""The live SGLang benchmark client against a fake SGLang server: real HTTP on 127.0.0.1 (http.server), SGLang's
endpoints and JSON shapes, and real speculative decoding behind it (a tiny target + an n-gram drafter through
eagle_nb.specdec), so the client's numbers can be checked against the offline metrics of the very same runs.

Shapes follow sgl-project/sglang:
- `POST /generate` (native API, `input_ids` + `sampling_params`) -> {"text", "output_ids", "meta_info"};
- `meta_info` spec fields from `python/sglang/srt/managers/tokenizer_manager.py` `_calculate_spec_decoding_metrics`:
  all builds `spec_verify_ct` (+ `completion_tokens`); 'mid' builds `spec_accept_rate`, `spec_accept_length`,
  `spec_accept_token_num`, `spec_draft_token_num`; 'new' builds `spec_accept_rate`, `spec_accept_length`,
  `spec_num_correct_drafts`, `spec_num_proposed_drafts`, aliases `spec_accepted_drafts`, `spec_proposed_drafts`,
  `spec_correct_drafts_histogram` (alias `spec_accept_histogram`);
- `GET /get_server_info` = server args + `internal_states` (`avg_spec_accept_length`) + `version`; the newest
  builds serve it as `GET /server_info` only.
"""
import contextlib, io, json, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import pytest, torch
from eagle_nb.core import EagleNbError
from eagle_nb.eval import (sglang_spec_benchmark, sglang_metrics, acceptance_metrics, EvalPrompt, eval_main, render_prompt)
from eagle_nb.specdec import SpecConfig, speculative_generate, NGramDrafter
from eagle_nb.target import tiny_target


class FakeSpecSGLang:
    "SGLang with --speculative-algorithm EAGLE3 (or without), answering like build `build`: 'new', 'mid', 'old', 'newest' or 'off'."
    def __init__(self, target, build='new', num_steps=3):
        self.target, self.build, self.num_steps = target, build, num_steps
        self.results, self.lock = [], threading.Lock()
        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), self._handler())
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}'

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start(); return self
    def __exit__(self, *a): self.httpd.shutdown(); self.httpd.server_close()

    def server_info(self):
        spec = self.build != 'off'
        accepted = sum(sum(r.accepted) for r in self.results); verify = sum(r.verify_count for r in self.results)
        return dict(model_path='tiny-llama', tokenizer_path='tiny-llama', dtype='bfloat16', tp_size=1,
                    speculative_algorithm='EAGLE3' if spec else None, speculative_draft_model_path='/drafts/eagle3' if spec else None,
                    speculative_num_steps=self.num_steps if spec else None, speculative_eagle_topk=1 if spec else None,
                    speculative_num_draft_tokens=self.num_steps + 1 if spec else None,
                    internal_states=[dict(avg_spec_accept_length=(1 + accepted / verify) if verify else None)], version='0.5.fake')

    def generate(self, body):
        ids, sp = body['input_ids'], body.get('sampling_params') or {}
        cfg = SpecConfig(num_steps=self.num_steps, max_new_tokens=int(sp.get('max_new_tokens', 128)),
                         temperature=float(sp.get('temperature', 1.0)))
        t0 = time.time()
        with self.lock:   # one tiny model, used by every handler thread
            r = speculative_generate(self.target, NGramDrafter(self.target.vocab_size), ids, cfg)
            self.results.append(r)
        n, v, acc = len(r.tokens), r.verify_count, sum(r.accepted)
        meta = dict(id=f'req{len(self.results)}', finish_reason=dict(type='stop', matched=r.tokens[-1]) if len(r.tokens) < cfg.max_new_tokens
                    else dict(type='length', length=cfg.max_new_tokens), prompt_tokens=len(ids), completion_tokens=n,
                    cached_tokens=0, e2e_latency=time.time() - t0)
        if self.build != 'off': meta['spec_verify_ct'] = v
        proposed = v * self.num_steps
        hist = [sum(a == i for a in r.accepted) for i in range(self.num_steps + 1)]
        if self.build == 'mid' and v:
            meta.update(spec_accept_rate=acc / proposed, spec_accept_length=n / v, spec_accept_token_num=acc, spec_draft_token_num=proposed)
        if self.build in ('new', 'newest') and v:
            meta.update(spec_accept_rate=acc / proposed, spec_accept_length=n / v, spec_num_correct_drafts=acc,
                        spec_num_proposed_drafts=proposed, spec_accepted_drafts=acc, spec_proposed_drafts=proposed,
                        spec_correct_drafts_histogram=hist, spec_accept_histogram=hist)
        return dict(text=self.target.tokenizer.decode(r.tokens), output_ids=r.tokens, meta_info=meta)

    def _handler(self):
        fake = self
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code); self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data))); self.end_headers(); self.wfile.write(data)
            def do_GET(self):
                if self.path == '/server_info' or (self.path == '/get_server_info' and fake.build != 'newest'):
                    return self._send(200, fake.server_info())
                self._send(404, {'detail': 'Not Found'})
            def do_POST(self):
                if self.path != '/generate': return self._send(404, {'detail': 'Not Found'})
                body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
                if not isinstance(body.get('input_ids'), list):
                    return self._send(400, {'error': {'message': 'Either text or input_ids should be provided.'}})
                self._send(200, fake.generate(body))
        return H


@pytest.fixture(scope='module')
def target():
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield tiny_target('llama', num_layers=2)
    torch.set_num_threads(n)


def prompts(t, n=6):
    texts = ['def add(a, b):', 'Hello! How can I help you today?', 'The quick brown fox', 'print(1)', 'for i in range(10):', 'Paris is']
    return [EvalPrompt(f'p{i}', 'mine' if i % 2 else 'other', render_prompt([dict(role='user', content=s)], t.tokenizer))
            for i, s in enumerate(texts[:n])]


def test_new_build_matches_offline_metrics(target):
    ps = prompts(target)
    with FakeSpecSGLang(target, 'new') as srv:
        doc = sglang_spec_benchmark(srv.url, ps, max_new_tokens=24)
        res = list(srv.results)
    m = doc['metrics']['all']
    off = acceptance_metrics([a for r in res for a in r.accepted], [x for r in res for x in r.tried],
                             [x for r in res for x in r.drafted], 3, sum(len(r.tokens) for r in res))
    assert m['requests'] == 6 and m['verify_count'] == off['verify_count']
    assert m['accept_length'] == pytest.approx(off['accept_length'])                          # tau, exactly
    assert m['sglang_spec_accept_length'] == pytest.approx(off['sglang_spec_accept_length'])  # SGLang's definition
    assert m['draft_acceptance_rate'] == pytest.approx(off['draft_acceptance_rate'])
    assert m['alpha'] == pytest.approx(off['alpha'])
    assert m['sglang_mean_request_accept_length'] is not None
    assert set(doc['metrics']['by_set']) == {'mine', 'other'}
    assert doc['server']['speculative_algorithm'] == 'EAGLE3' and doc['server']['speculative_num_draft_tokens'] == 4
    assert [r['id'] for r in doc['requests']] == [p.id for p in ps]
    assert 1 < m['accept_length'] <= 4


@pytest.mark.parametrize('build', ['mid', 'old', 'newest'])
def test_older_and_newer_builds(target, build):
    ps = prompts(target, 4)
    with FakeSpecSGLang(target, build) as srv:
        doc = sglang_spec_benchmark(srv.url, ps, max_new_tokens=24)
        res = list(srv.results)
    m = doc['metrics']['all']
    verify, completion = sum(r.verify_count for r in res), sum(len(r.tokens) for r in res)
    assert m['sglang_spec_accept_length'] == pytest.approx(completion / verify)
    tau = 1 + sum(sum(r.accepted) for r in res) / verify
    if build == 'old':   # no per-draft counts: the prefill token is removed, truncated last rounds make it a lower bound
        assert 'counts in this build' in m['accept_length_source']
        assert m['accept_length'] <= tau + 1e-9 and m['accept_length'] > tau - 0.5
        assert 'alpha' not in m and 'draft_acceptance_rate' not in m
    else:
        assert m['accept_length'] == pytest.approx(tau)
        assert m['draft_acceptance_rate'] == pytest.approx(sum(sum(r.accepted) for r in res) / (verify * 3))


def test_two_servers_concurrency(target):
    ps = prompts(target, 6)
    with FakeSpecSGLang(target, 'new') as a, FakeSpecSGLang(target, 'new') as b:
        doc = sglang_spec_benchmark([a.url, b.url], ps, max_new_tokens=16, concurrency=3)
        assert len(a.results) == 3 and len(b.results) == 3
    assert [r['url'] for r in doc['requests']] == [a.url, b.url] * 3
    assert doc['speed']['concurrency'] == 3 and doc['speed']['completion_tokens_per_s'] > 0


def test_errors_say_what_to_do(target):
    ps = prompts(target, 1)
    with FakeSpecSGLang(target, 'off') as srv:
        with pytest.raises(EagleNbError, match='--speculative-algorithm EAGLE3'):
            sglang_spec_benchmark(srv.url, ps)
    with pytest.raises(EagleNbError, match='no meta_info.spec_verify_ct'):
        sglang_metrics([dict(completion_tokens=5)])
    with FakeSpecSGLang(target) as srv: url = srv.url
    with pytest.raises(EagleNbError, match='cannot reach the server'):
        sglang_spec_benchmark(url, ps)


def test_eval_main_sglang_json(target, tmp_path):
    (tmp_path/'p.jsonl').write_text('{"prompt": "def add(a, b):"}\n{"prompt": "Hello!"}\n')
    with FakeSpecSGLang(target, 'new') as srv:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = eval_main(['--sglang-url', srv.url, '--target', 'tiny-llama', '--prompts', str(tmp_path/'p.jsonl'),
                            '--max-new-tokens', '12', '--json', '--out', str(tmp_path/'s.json')])
    assert rc == 0
    doc = json.loads(buf.getvalue())
    assert doc['format'] == 'eagle_nb.sglang_bench/1' and doc['metrics']['all']['requests'] == 2
    assert json.loads((tmp_path/'s.json').read_text()) == doc
    assert 'conversion_chain' in doc['conventions']
