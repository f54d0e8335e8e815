"""A protocol-faithful fake SGLang server for tests: real HTTP on 127.0.0.1, SGLang's endpoints and JSON shapes,
hidden states computed from a tiny target, and injectable faults.

Endpoints and shapes follow sgl-project/sglang:
- `python/sglang/srt/entrypoints/http_server.py`: `POST|PUT /generate` (GenerateReqInput; errors as
  `{"error": {"message": ...}}` with status 400), `GET /get_server_info` (`dataclasses.asdict(server_args)` merged
  with the scheduler info, `internal_states`, `version`; newer builds also `GET /server_info`), `GET /health`
  and `/health_generate` (empty 200);
- `managers/scheduler_output_processor_mixin.py` + `tokenizer_manager.py`: `meta_info["hidden_states"]` is a list,
  the prefill contributes one 2-D list (one row per *computed* token), each decode step a 1-D list;
  `meta_info["cached_tokens"]` counts the prefix served from the radix cache;
- `layers/logits_processor.py`: the returned tensor is the post-norm final state, or the aux layers concatenated
  when EAGLE-3 aux capture is on;
- responses are serialised with orjson: compact, and NaN/inf become `null`.

Emulated server behaviour: the radix cache (a prefix seen before is not recomputed, at least the last token is,
`cached_tokens > 0`), chunked prefill (only the last chunk's rows come back).

Faults (by request number on this server, or at random with a seed), each one a kind:
  '5xx' HTTP 503 | 'timeout' hang (up to `hang_s`, ended by stop()) before answering | 'drop' close without answering | 'reset' RST the
  connection | 'truncate' send half the body under the full Content-Length | 'nan' one row of NaN (sent as null) |
  'width' every row one value short | 'ragged' one row one value short | 'cached' radix-cache answer (1 row,
  cached_tokens = T-1) | 'chunked' only the last few rows, cached_tokens 0 | 'badjson' a body that is not JSON.
"""
from __future__ import annotations
import json, random, socket, struct, threading, time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

FAULTS = ('5xx', 'timeout', 'drop', 'reset', 'truncate', 'nan', 'width', 'ragged', 'cached', 'chunked', 'badjson')
# the client's fault kind for each injected fault (eagle_nb.sglang.FAULT_KINDS)
CLIENT_KIND = {'5xx': 'http_5xx', 'timeout': 'timeout', 'drop': 'connection', 'reset': 'connection', 'truncate': 'truncated',
               'nan': 'nonfinite', 'width': 'width', 'ragged': 'ragged', 'cached': 'cached_tokens', 'chunked': 'rows',
               'badjson': 'bad_json'}

GOOD_ARGS = dict(enable_return_hidden_states=True, disable_radix_cache=True, chunked_prefill_size=-1,
                 speculative_algorithm=None, disable_cuda_graph=True)


def default_server_args(**over) -> dict:
    "A plausible subset of SGLang ServerArgs (names as in python/sglang/srt/server_args.py)."
    args = dict(model_path='tiny-llama', tokenizer_path='tiny-llama', skip_tokenizer_init=False, host='127.0.0.1', port=0,
                dtype='bfloat16', tp_size=1, dp_size=1, random_seed=0, mem_fraction_static=0.8, context_length=None,
                enable_return_hidden_states=False, disable_radix_cache=False, chunked_prefill_size=8192,
                disable_cuda_graph=False, speculative_algorithm=None, attention_backend=None, kv_cache_dtype='auto',
                quantization=None, page_size=1)
    args.update(over)
    return args


class FakeSGLang:
    "A fake SGLang server on 127.0.0.1 (ephemeral port). Use as a context manager; `url` once started."
    def __init__(self, target=None, *,
                 layer_ids=None,              # canonical HF ids to return concatenated (EAGLE-3 aux capture); None: final state
                 server_args: dict|None = None,  # overrides of default_server_args(); default: extraction-ready flags
                 faults: dict|None = None,    # {request number (1-based, /generate only): fault kind}
                 fault_rate: float = 0.0,     # probability of a random fault per /generate request
                 fault_kinds=FAULTS,          # kinds drawn when fault_rate > 0
                 seed: int = 0,
                 hang_s: float = 60.0,        # how long a 'timeout' fault hangs at most (stop() ends it sooner)
                 new_api: bool = True,        # serve /server_info too (newer builds)
                 old_api: bool = True,        # serve /get_server_info (older builds; deprecated later)
                 version: str = '0.5.4',
                 states_dtype=torch.bfloat16,  # values on the wire are exact values of this dtype
                 latency_s: float = 0.0):      # added to every /generate (to measure concurrency)
        if target is None:
            from eagle_nb.target import tiny_target
            target = tiny_target('llama')
        self.target, self.layer_ids = target, layer_ids
        self.server_args = default_server_args(**GOOD_ARGS) if server_args is None else default_server_args(**server_args)
        self.faults = dict(faults or {})
        self.fault_rate, self.fault_kinds, self.rng = fault_rate, tuple(fault_kinds), random.Random(seed)
        self.hang_s, self.new_api, self.old_api, self.version = hang_s, new_api, old_api, version
        self.states_dtype, self.latency_s = states_dtype, latency_s
        self.lock = threading.Lock()          # counters, rng, radix cache
        self.forward_lock = threading.Lock()  # one forward at a time on the shared model
        self.requests = 0                     # /generate requests received
        self.in_flight = self.max_in_flight = 0  # /generate requests being answered now / at most at once
        self._stopping = threading.Event()    # set by stop(): a hung 'timeout' handler returns at once
        self.injected = Counter()             # fault kind -> times injected
        self.served = Counter()               # tuple(input_ids) -> good answers sent
        self.radix: list[tuple] = []          # prompts seen (the radix cache)
        self.httpd = None

    # ---------- lifecycle ----------
    def start(self) -> 'FakeSGLang':
        fake = self
        class Handler(_Handler): server_fake = fake
        self.httpd = _Server(('127.0.0.1', 0), Handler)
        self.server_args['port'] = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs=dict(poll_interval=0.05), daemon=True).start()
        return self

    @property
    def url(self) -> str: return f"http://127.0.0.1:{self.server_args['port']}"   # still known after stop()

    def stop(self):
        "Stop serving, end hung 'timeout' handlers, close open keep-alive connections, and wait for handler threads."
        self._stopping.set()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.close_connections()
            self.httpd.server_close()       # joins the handler threads
            self.httpd = None

    def __enter__(self): return self.start()
    def __exit__(self, *exc): self.stop()

    # ---------- the model ----------
    @torch.no_grad()
    def states(self, input_ids: list[int]) -> torch.Tensor:
        "(T, width) float32: post-norm final state, or the aux layers concatenated; values exact in states_dtype."
        with self.forward_lock:
            out = self.target.model(torch.tensor([input_ids]), output_hidden_states=True)
        hs = out.hidden_states                # L+1 tensors (1, T, H); hs[L] is post-norm
        L = len(hs) - 1
        ids = [L] if self.layer_ids is None else list(self.layer_ids)
        x = torch.cat([hs[k][0] for k in ids], dim=-1)
        return x.to(self.states_dtype).float()

    def server_info(self) -> dict:
        return {**self.server_args, 'max_total_num_tokens': 65536, 'max_req_input_len': 4096,
                'internal_states': [{'avg_spec_accept_length': None, 'last_gen_throughput': 0.0}], 'version': self.version}

    def next_fault(self) -> str|None:
        with self.lock:
            self.requests += 1
            n = self.requests
            kind = self.faults.get(n)
            if kind is None and self.fault_rate and self.rng.random() < self.fault_rate:
                kind = self.rng.choice(self.fault_kinds)
            if kind: self.injected[kind] += 1
            return kind

    def radix_lookup(self, ids: tuple) -> int:
        "Tokens of `ids` served from the radix cache (longest prefix seen before, the last token always recomputed)."
        if self.server_args.get('disable_radix_cache'): return 0
        with self.lock:
            best = 0
            for p in self.radix:
                n = 0
                for a, b in zip(p, ids):
                    if a != b: break
                    n += 1
                best = max(best, n)
            self.radix.append(ids)
        return min(best, len(ids) - 1)


class _Server(ThreadingHTTPServer):
    "Tracks open connections so that stop() can close idle keep-alive ones; quiet about clients that went away."
    daemon_threads = False
    block_on_close = True

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.open_socks, self.socks_lock = set(), threading.Lock()

    def process_request(self, request, client_address):
        with self.socks_lock: self.open_socks.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self.socks_lock: self.open_socks.discard(request)
        super().shutdown_request(request)

    def close_connections(self):
        with self.socks_lock: socks = list(self.open_socks)
        for s in socks:
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass

    def handle_error(self, request, client_address):
        import sys
        if not isinstance(sys.exc_info()[1], OSError): super().handle_error(request, client_address)


def _dumps(obj) -> bytes:
    "Compact JSON with NaN/inf as null, like orjson."
    s = json.dumps(obj, separators=(',', ':'), allow_nan=True)
    return s.replace('-Infinity', 'null').replace('Infinity', 'null').replace('NaN', 'null').encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'     # keep-alive, Content-Length on every answer
    server_fake: FakeSGLang = None

    def log_message(self, *a): pass

    def _send(self, status: int, body: bytes, ctype='application/json'):
        self.send_response(status)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, msg: str): self._send(status, _dumps({'error': {'message': msg}}))

    def do_GET(self):
        f = self.server_fake
        path = self.path.split('?')[0]
        if path in ('/health', '/health_generate'): return self._send(200, b'', 'text/plain')
        if (path == '/get_server_info' and f.old_api) or (path == '/server_info' and f.new_api):
            return self._send(200, _dumps(f.server_info()))
        if path == '/get_model_info':
            return self._send(200, _dumps({'model_path': f.server_args['model_path'], 'is_generation': True}))
        self._send(404, _dumps({'detail': 'Not Found'}))

    def do_PUT(self): self.do_POST()

    def do_POST(self):
        f = self.server_fake
        n = int(self.headers.get('Content-Length') or 0)
        raw = self.rfile.read(n)
        if self.path.split('?')[0] != '/generate': return self._send(404, _dumps({'detail': 'Not Found'}))
        try: req = json.loads(raw)
        except json.JSONDecodeError as e: return self._error(400, f'invalid JSON: {e}')
        ids = req.get('input_ids')
        if not ids or not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            return self._error(400, 'Either text, input_ids or input_embeds should be provided.')
        if req.get('return_hidden_states') and not f.server_args.get('enable_return_hidden_states'):
            return self._error(400, 'return_hidden_states=True requires the server to be started with --enable-return-hidden-states')
        V = f.target.vocab_size
        if max(ids) >= V or min(ids) < 0: return self._error(400, f'The input_ids {max(ids)} exceeds the vocab size {V}')
        fault = f.next_fault()
        with f.lock: f.in_flight += 1; f.max_in_flight = max(f.max_in_flight, f.in_flight)
        try: self._generate(f, ids, fault)
        finally:
            with f.lock: f.in_flight -= 1

    def _generate(self, f, ids, fault):
        if f.latency_s: time.sleep(f.latency_s)
        if fault == 'timeout':
            # hang until the client has long given up (its timeout), or until stop(): never a race with a slow machine
            f._stopping.wait(f.hang_s); self.close_connection = True
            try: self._error(503, 'late')
            except OSError: pass
            return
        if fault == 'drop':
            self.close_connection = True; return
        if fault == 'reset':
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
            self.close_connection = True; return
        if fault == '5xx': return self._error(503, 'The server is overloaded (injected)')
        if fault == 'badjson': return self._send(200, b'<html>502 Bad Gateway</html>', 'text/html')

        T = len(ids)
        states = f.states(ids)                                            # (T, W)
        cached = f.radix_lookup(tuple(ids))
        rows = states[cached:]
        cps = f.server_args.get('chunked_prefill_size') or -1
        if cps > 0 and T - cached > cps:                                  # only the last chunk's rows come back
            rows = rows[(T - cached - 1) // cps * cps:]
        if fault == 'cached': rows, cached = states[-1:], T - 1
        if fault == 'chunked': rows = states[-max(1, T // 2):]
        hs = rows.tolist()
        if fault == 'nan': hs[len(hs) // 2] = [float('nan')] * len(hs[0])
        if fault == 'width': hs = [r[:-1] for r in hs]
        if fault == 'ragged': hs[-1] = hs[-1][:-1]
        next_tok = int(torch.argmax(f.target.model.lm_head(states[-1:, -f.target.hidden_size:].float()))) if f.layer_ids is None else 0
        body = _dumps({'text': '', 'output_ids': [next_tok], 'meta_info': {
            'id': f'{f.requests:08x}', 'finish_reason': {'type': 'length', 'length': 1}, 'prompt_tokens': T,
            'weight_version': 'default', 'completion_tokens': 1, 'cached_tokens': cached,
            'hidden_states': [hs], 'e2e_latency': 0.001}})
        if fault == 'truncate':
            self.send_response(200)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body[:len(body) // 2]); self.wfile.flush()
            self.close_connection = True
            return
        if fault is None:
            with f.lock: f.served[tuple(ids)] += 1
        self._send(200, body)
