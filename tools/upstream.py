#!/usr/bin/env python
"""The upstream `speculators` package (vllm-project/speculators) for tests/test_drafter_upstream.py, in a directory of its own.

speculators 0.9.0 declares torchvision and torchaudio, which PyPI has only in builds that pull CUDA torch or break beside the
local CPU wheel, so it cannot go into the project venv (whose `pip check` the Makefile runs). Its model code needs neither.
This installs speculators and exactly the packages of its dependency tree that the project venv lacks (every one pinned,
`--no-deps`, so pip adds nothing else) into `$EAGLE_NB_HOME/upstream/speculators-<key>`, keyed by the pins like the engine
venvs: built once per machine (17 s on the Zen 4, 228 MB), reused by every clone. The test puts that directory
on sys.path; nothing in it shadows a package of the project venv (`build` checks that).

    python tools/upstream.py build      # make test does this (Makefile target `upstream`)
    python tools/upstream.py path

It runs in the project venv (after `make install`), so it takes the cache's place from eagle_nb.core. The pins are what `pip install --dry-run --report` in the project venv chose for speculators'
declared dependencies less torch, torchvision and torchaudio (2026-12-07), with speculators itself, less fsspec: the dry run
chose 2026.7.0 for datasets' `fsspec<=2026.7.0`, but the venv's 2026.9.0 comes first on sys.path, so the test imports it."""
import hashlib, json, os, shutil, subprocess, sys, time
from pathlib import Path

from eagle_nb.core import home_dir

PINS = ('speculators==0.9.0', 'hs-connectors==0.9.0', 'loguru==0.7.3', 'openai==3.63.0', 'datasets==5.1.0',
        'pydantic-settings==2.16.3', 'dill==0.4.1', 'jiter==0.19.0', 'multiprocess==0.70.19', 'pyarrow==26.0.1',
        'python-dotenv==1.2.4', 'sniffio==1.3.1', 'xxhash==4.1.0', 'aiohttp==3.14.5',
        'aiohappyeyeballs==2.7.1', 'aiosignal==1.4.0', 'frozenlist==1.8.0', 'multidict==7.2.1', 'propcache==0.5.4',
        'yarl==1.25.1')
CHECK = 'from speculators.models.eagle3 import Eagle3SpeculatorConfig, Eagle3DraftModel; import speculators; print(speculators.__file__)'


def key() -> str: return hashlib.sha256(json.dumps(PINS).encode()).hexdigest()[:12]


def target_dir() -> Path: return home_dir()/'upstream'/f'speculators-{key()}'


def ready() -> bool: return (target_dir()/'.complete').exists()


def _shadows(d: Path) -> list[str]:
    "Top-level modules in `d` that this interpreter can already import (a package the project venv has)."
    import importlib.util
    names = {p.name.removesuffix('.py') for p in d.iterdir()
             if not p.name.endswith(('.dist-info', '.data')) and not p.name.startswith('.') and p.name not in ('bin', '__pycache__')}
    return sorted(n for n in names if n.isidentifier() and importlib.util.find_spec(n) is not None)


def build(force: bool = False) -> Path:
    d = target_dir()
    if ready() and not force: return d
    if d.exists(): shutil.rmtree(d)                        # no stamp: a build that was cut off
    d.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    print(f'installing speculators for the upstream test into {d} (pins {key()})', flush=True)
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--disable-pip-version-check', '--no-deps',
                    '--target', str(d), *PINS], check=True)
    clash = _shadows(d)
    if clash:
        shutil.rmtree(d)
        raise SystemExit(f'upstream: {", ".join(clash)} would shadow the project venv\'s own; update PINS in {__file__}')
    r = subprocess.run([sys.executable, '-c', CHECK], env={**os.environ, 'PYTHONPATH': str(d)}, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f'upstream: speculators does not import from {d}:\n{r.stderr[-2000:]}')
    (d/'.complete').write_text(json.dumps(dict(pins=PINS, key=key(), seconds=round(time.time() - t0, 1),
                                               built=time.strftime('%Y-%m-%dT%H:%M:%S')), indent=1) + '\n')
    print(f'speculators ready in {time.time() - t0:.0f} s', flush=True)
    return d


if __name__ == '__main__':
    what = sys.argv[1] if len(sys.argv) > 1 else 'build'
    if what == 'build': print(build(force='--force' in sys.argv))
    elif what == 'path': print(target_dir() if ready() else sys.exit(f'not built: python {__file__} build'))
    else: sys.exit(f'usage: {__file__} build [--force] | path')
