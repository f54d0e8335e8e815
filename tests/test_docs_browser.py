"""The documentation site, built and opened in headless Chromium: every page loads without console errors
or failed requests, every sidebar link resolves, plots are present, and a screenshot is saved."""
import json, threading, functools
from http.server import ThreadingHTTPServer, SimpleHTTPRequestHandler
from pathlib import Path
import pytest
from cdp import Browser, chromium_path
from eagle_nb.docs import build_site
from eagle_nb.core import runs_dir

ROOT = Path(__file__).resolve().parents[1]

class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *a): pass

@pytest.fixture(scope='module')
def site():
    out = build_site(ROOT, out=ROOT/'_docs', verbose=False)
    srv = ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(_Quiet, directory=str(out)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield out, f'http://127.0.0.1:{srv.server_address[1]}'
    srv.shutdown()

def _expected_images(nb_path: Path) -> int:
    nb = json.loads(nb_path.read_text())
    return sum('image/png' in o.get('data', {}) for c in nb['cells'] for o in c.get('outputs', []))

@pytest.mark.slow
@pytest.mark.skipif(chromium_path() is None, reason='chromium is not installed (make test installs it)')
def test_site_in_browser(site):
    out, base = site
    shots = runs_dir()/'docs'; shots.mkdir(parents=True, exist_ok=True)
    with Browser() as b:
        assert b.load(f'{base}/index.html') == []
        links = b.eval('[...document.querySelectorAll("nav a")].map(a => a.getAttribute("href"))')
        pages = sorted(set(links))
        assert len(pages) >= 8, pages
        b.screenshot(shots/'index.png')
        problems, imgs = {}, {}
        for p in pages:
            errs = b.load(f'{base}/{p}')
            if errs: problems[p] = errs
            assert b.eval('document.querySelector("main h1") !== null'), f'{p}: no title'
            imgs[p] = b.eval('document.querySelectorAll("main img").length')
        assert not problems, problems
        # every plot a notebook produced is on its page
        exec_dir = ROOT/'_exec'
        from eagle_nb.docs import site_sidebar, _front_matter
        import nbformat
        for _, files in site_sidebar(ROOT/'_quarto.yml'):
            for f in files:
                page = _front_matter(nbformat.read(ROOT/'_proc'/f, as_version=4)).get('output-file', Path(f).with_suffix('.html').name)
                assert imgs.get(page, 0) >= _expected_images(exec_dir/f), (f, page, imgs.get(page))
        with_plots = [p for p, n in imgs.items() if n]
        if with_plots:
            b.load(f'{base}/{with_plots[0]}'); b.screenshot(shots/'plots.png')
    assert (shots/'index.png').stat().st_size > 10_000
