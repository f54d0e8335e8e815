"""A fake OpenAI-compatible chat server for tests: real HTTP on 127.0.0.1 (ephemeral port, stdlib ThreadingHTTPServer).

It speaks the subset of SGLang's and vLLM's OpenAI API that `eagle_nb.regenerate` uses: `GET /v1/models` and
`POST /v1/chat/completions` (non-streaming), with the response shape of an OpenAI `chat.completion` object
(`choices[0].message.content`, `finish_reason` 'stop'|'length', `usage`), as SGLang returns it from
python/sglang/srt/entrypoints/openai/serving_chat.py and vLLM from vllm/entrypoints/openai/serving_chat.py.
Errors are OpenAI error objects (`{"object": "error", "message", "type", "code"}`).

Answers come from a function `answer(messages, max_tokens, temperature, top_p, seed) -> (text, finish_reason,
completion_tokens)`: `echo_answer` (deterministic, depends on the whole context) or `hf_answerer(target)` (a tiny
target answering with its chat template, greedy at temperature 0, so results can be compared with the in-process
backend). Faults are scripted: a list consumed one per chat request, each None (answer normally) or one of FAULTS.

Run alone: `python tests/fake_openai.py [--port 0] [--delay 0.1]` serves `echo_answer` and prints its URL.
"""
from __future__ import annotations
import argparse, hashlib, json, socket, threading, time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ('500', '502', '503', '429', '400', 'timeout', 'truncate', 'reset', 'badjson')


def echo_answer(messages, max_tokens, temperature, top_p, seed):
    "A hash of the whole context, then the last message's words reversed; cut to `max_tokens` words."
    h = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:8]
    words = [h] + messages[-1]['content'].split()[::-1]
    finish = 'length' if len(words) > max_tokens else 'stop'
    words = words[:max_tokens]
    return ' '.join(words), finish, len(words) + (finish == 'stop')  # like servers: the stop token is counted


def hf_answerer(target):
    "Answers computed by `target` in this process (one at a time, under a lock), as the hf backend would."
    from eagle_nb.regenerate import HFBackend, RegenerateConfig
    backend, lock = HFBackend(target, batch_size=1), threading.Lock()
    def answer(messages, max_tokens, temperature, top_p, seed):
        cfg = RegenerateConfig(max_new_tokens=max_tokens, temperature=temperature, top_p=top_p)
        with lock: g = backend.generate([messages], [seed or 0], cfg)[0]
        return g.text, g.finish_reason, g.completion_tokens
    return answer


class FakeOpenAI:
    "An OpenAI-compatible chat server on 127.0.0.1 with scripted faults; a context manager."
    def __init__(self, answer=echo_answer, model='fake-model', faults=(), delay=0.0, hang=60.0, port=0):
        bad = [f for f in faults if f is not None and f not in FAULTS]
        if bad: raise ValueError(f'unknown faults {bad}; known: {FAULTS}')
        self.answer, self.model, self.delay, self.hang, self.port = answer, model, delay, hang, port
        self.faults, self.counts, self.bodies = list(faults), Counter(), []
        self.in_flight = self.max_in_flight = 0  # chat requests being answered now / at most at once
        self._lock = threading.Lock()
        self._stopping = threading.Event()       # set by stop(): a handler hung in a 'timeout' fault returns at once
        self.httpd = None

    def next_fault(self):
        with self._lock:
            f = self.faults.pop(0) if self.faults else None
            self.counts[f or 'ok'] += 1
            return f

    def start(self) -> 'FakeOpenAI':
        self.httpd = ThreadingHTTPServer(('127.0.0.1', self.port), _handler(self))
        self.httpd.daemon_threads = True   # a handler sleeping in a 'timeout' fault must not block shutdown
        self.httpd.block_on_close = False
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs=dict(poll_interval=0.05), daemon=True)
        self.thread.start()
        self.url = f'http://127.0.0.1:{self.httpd.server_port}'
        return self

    def stop(self):
        self._stopping.set()
        if self.httpd: self.httpd.shutdown(); self.httpd.server_close(); self.httpd = None

    def __enter__(self): return self.start()
    def __exit__(self, *exc): self.stop()


def _error(code: int, message: str) -> dict:
    return {'object': 'error', 'message': message, 'type': 'BadRequestError' if code < 500 else 'InternalServerError', 'param': None, 'code': code}


def _handler(srv: FakeOpenAI):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'
        def log_message(self, *a): pass

        def _send(self, code: int, obj=None, raw: bytes|None = None, length: int|None = None):
            body = raw if raw is not None else json.dumps(obj).encode()
            self.send_response(code)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body) if length is None else length))
            self.end_headers()
            self.wfile.write(body); self.wfile.flush()

        def do_GET(self):
            if self.path == '/v1/models':
                self._send(200, {'object': 'list', 'data': [{'id': srv.model, 'object': 'model', 'created': 0, 'owned_by': 'fake'}]})
            elif self.path in ('/health', '/health_generate'): self._send(200, {})
            else: self._send(404, _error(404, f'no route {self.path}'))

        def do_POST(self):
            if self.path != '/v1/chat/completions': return self._send(404, _error(404, f'no route {self.path}'))
            try: body = json.loads(self.rfile.read(int(self.headers.get('Content-Length', 0))))
            except ValueError: return self._send(400, _error(400, 'request body is not JSON'))
            problem = _validate(body, srv.model)
            if problem: return self._send(*problem)
            with srv._lock:
                srv.bodies.append(body); srv.in_flight += 1; srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            try: self._answer(body, srv.next_fault())
            finally:
                with srv._lock: srv.in_flight -= 1

        def _answer(self, body, fault):
            if fault in ('500', '502', '503', '429'): return self._send(int(fault), _error(int(fault), f'injected {fault}'))
            if fault == '400': return self._send(400, _error(400, "This model's maximum context length is 8192 tokens (injected)"))
            if fault == 'reset':  # close without a response: the client sees RemoteDisconnected / ConnectionReset
                self.close_connection = True
                try: self.connection.shutdown(socket.SHUT_RDWR)
                except OSError: pass
                return
            if fault == 'timeout':  # hang until stop() (or `hang` s): the client gave up long ago; the answer below goes nowhere
                srv._stopping.wait(srv.hang)
            if srv.delay: time.sleep(srv.delay)
            text, finish, ntok = srv.answer(body['messages'], body.get('max_tokens') or body.get('max_completion_tokens') or 16,
                                            body.get('temperature', 1.0), body.get('top_p', 1.0), body.get('seed'))
            n_prompt = sum(len(m['content'].split()) for m in body['messages'])
            resp = {'id': f'chatcmpl-{sum(srv.counts.values())}', 'object': 'chat.completion', 'created': int(time.time()), 'model': srv.model,
                    'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': text, 'reasoning_content': None, 'tool_calls': None},
                                 'logprobs': None, 'finish_reason': finish, 'matched_stop': None}],
                    'usage': {'prompt_tokens': n_prompt, 'completion_tokens': ntok, 'total_tokens': n_prompt + ntok}}
            raw = json.dumps(resp).encode()
            try:
                if fault == 'truncate':  # promise the whole body, send half, hang up: http.client raises IncompleteRead
                    self.close_connection = True
                    return self._send(200, raw=raw[:len(raw) // 2], length=len(raw))
                if fault == 'badjson': return self._send(200, raw=raw[:len(raw) // 2])  # consistent length, broken JSON
                self._send(200, raw=raw)
            except OSError: pass  # the client hung up (after a timeout)
    return Handler


def _validate(body, model):
    "An error response for a request vLLM/SGLang would refuse, or None."
    if not isinstance(body, dict): return 400, _error(400, 'body must be an object')
    if body.get('model') != model: return 404, _error(404, f"The model `{body.get('model')}` does not exist.")
    msgs = body.get('messages')
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) and m.get('role') in ('system', 'user', 'assistant')
                                                         and isinstance(m.get('content'), str) for m in msgs):
        return 400, _error(400, 'messages must be a non-empty list of {role, content}')
    mt = body.get('max_tokens', body.get('max_completion_tokens'))
    if mt is not None and (not isinstance(mt, int) or mt < 1): return 400, _error(400, 'max_tokens must be a positive integer')
    if body.get('stream'): return 400, _error(400, 'this fake does not stream')
    return None


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description='serve echo answers on an OpenAI-compatible API until interrupted')
    ap.add_argument('--port', type=int, default=0)
    ap.add_argument('--delay', type=float, default=0.0, help='seconds per answer')
    a = ap.parse_args()
    srv = FakeOpenAI(delay=a.delay, port=a.port).start()
    print(srv.url, flush=True)
    try: srv.thread.join()
    except KeyboardInterrupt: srv.stop()
