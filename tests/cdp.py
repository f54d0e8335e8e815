"""A minimal Chrome DevTools Protocol client over `--remote-debugging-pipe` (stdlib only).

Chromium reads NUL-terminated JSON commands on fd 3 and writes responses/events on fd 4, so no websocket
library is needed. Used by the docs browser test: load a page, collect console errors, exceptions, failed
requests and HTTP errors, evaluate JS, take a screenshot.
"""
import base64, json, os, shutil, subprocess, tempfile, threading, time, queue

FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync', '--disable-quic', '--disable-dev-shm-usage']

def chromium_path():
    for n in ('chromium', 'chromium-browser', 'google-chrome'):
        if p := shutil.which(n): return p
    return None

class Browser:
    def __init__(self, width=1280, height=900, timeout=30):
        exe = chromium_path()
        if exe is None: raise RuntimeError('chromium not found: apt-get install chromium (make test does this)')
        self.timeout = timeout
        c_in_r, c_in_w = os.pipe()    # we write commands -> chromium reads fd 3
        c_out_r, c_out_w = os.pipe()  # chromium writes fd 4 -> we read
        self._udd = tempfile.mkdtemp(prefix='eagle_nb_chromium_')
        def _fds():  # in the child: put the pipe ends on fds 3 and 4 (via high numbers, in case they overlap)
            a, b = os.dup(c_in_r), os.dup(c_out_w)
            a2, b2 = os.dup2(a, 100), os.dup2(b, 101)
            os.dup2(100, 3); os.dup2(101, 4)
            os.set_inheritable(3, True); os.set_inheritable(4, True)
        self.proc = subprocess.Popen([exe, *FLAGS, '--remote-debugging-pipe', f'--user-data-dir={self._udd}',
                                      f'--window-size={width},{height}', 'about:blank'],
                                     close_fds=False, preexec_fn=_fds,
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(self._udd, 'stderr.log'), 'wb'))
        os.close(c_in_r); os.close(c_out_w)
        self._w = os.fdopen(c_in_w, 'wb', buffering=0); self._r = os.fdopen(c_out_r, 'rb', buffering=0)
        self._id = 0; self._pending = {}; self.events = queue.Queue(); self._lock = threading.Lock()
        threading.Thread(target=self._reader, daemon=True).start()
        tid = self.call('Target.createTarget', url='about:blank')['targetId']
        self.session = self.call('Target.attachToTarget', targetId=tid, flatten=True)['sessionId']
        for dom in ('Page', 'Runtime', 'Log', 'Network'): self.call(f'{dom}.enable', session=True)

    def _reader(self):
        buf = b''
        while True:
            chunk = self._r.read(65536)
            if not chunk: break
            buf += chunk
            while b'\0' in buf:
                msg, buf = buf.split(b'\0', 1)
                m = json.loads(msg)
                if 'id' in m and m['id'] in self._pending: self._pending.pop(m['id']).put(m)
                elif 'method' in m: self.events.put(m)

    def call(self, method, session=False, **params):
        with self._lock:
            self._id += 1; i = self._id
            q = queue.Queue(); self._pending[i] = q
            msg = {'id': i, 'method': method, 'params': params}
            if session: msg['sessionId'] = self.session
            self._w.write(json.dumps(msg).encode() + b'\0')
        m = q.get(timeout=self.timeout)
        if 'error' in m: raise RuntimeError(f"{method}: {m['error']}")
        return m.get('result', {})

    def load(self, url):
        "Navigate and wait for load; return a list of problems (console errors, exceptions, failed/4xx requests)."
        while not self.events.empty(): self.events.get_nowait()
        self.call('Page.navigate', session=True, url=url)
        problems, deadline, loaded = [], time.time() + self.timeout, False
        while time.time() < deadline:
            try: e = self.events.get(timeout=0.5)
            except queue.Empty:
                if loaded: break
                continue
            m, p = e['method'], e.get('params', {})
            if m == 'Page.loadEventFired': loaded = True; deadline = min(deadline, time.time() + 1.0)
            elif m == 'Runtime.consoleAPICalled' and p.get('type') in ('error', 'assert'):
                problems.append('console.error: ' + ' '.join(str(a.get('value', a.get('description', ''))) for a in p.get('args', [])))
            elif m == 'Runtime.exceptionThrown':
                problems.append('exception: ' + p.get('exceptionDetails', {}).get('text', ''))
            elif m == 'Log.entryAdded' and p.get('entry', {}).get('level') == 'error':
                problems.append('log error: ' + p['entry'].get('text', '') + ' ' + p['entry'].get('url', ''))
            elif m == 'Network.loadingFailed':
                problems.append('request failed: ' + p.get('errorText', ''))
            elif m == 'Network.responseReceived' and p.get('response', {}).get('status', 200) >= 400:
                problems.append(f"HTTP {p['response']['status']}: {p['response'].get('url')}")
        if not loaded: problems.append(f'page did not finish loading within {self.timeout}s')
        return problems

    def eval(self, expr):
        r = self.call('Runtime.evaluate', session=True, expression=expr, returnByValue=True)
        return r.get('result', {}).get('value')

    def screenshot(self, path):
        data = self.call('Page.captureScreenshot', session=True, format='png')['data']
        with open(path, 'wb') as f: f.write(base64.b64decode(data))
        return path

    def close(self):
        try: self.call('Browser.close')
        except Exception: pass
        try: self.proc.wait(timeout=5)
        except Exception: self.proc.kill()
        shutil.rmtree(self._udd, ignore_errors=True)

    def __enter__(self): return self
    def __exit__(self, *a): self.close()
