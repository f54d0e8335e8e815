#!/usr/bin/env python
"""`pip install ARGS` into this interpreter's environment, through uv when it can be had (the Makefile's set-up).

uv (a pip-compatible installer, on PyPI) installs torch and the pins in 46 s here where pip takes 104 s (a 2-core AMD EPYC
Zen 3, both from a fresh venv, the same 118 packages at the same versions; uv's cache warm, pip keeps none). uv does not read pip's configuration, so the settings that
say where packages come from (find-links, index-url, extra-index-url, constraint, no-index: on this machine the local
torch CPU wheel and the cap that keeps pip from pulling CUDA) are read from `pip config list` and handed to it; a local
index that does not exist is left out, as pip leaves it out, and every index is searched for the best version, as pip
does (uv's `unsafe-best-match`; its default takes the first index that has the package, which picked older releases
from the local index here). Anything uv cannot do falls back to pip, saying so.
Standard library only: it runs before anything is installed."""
import os, shlex, subprocess, sys
from pathlib import Path
from urllib.parse import urlparse

UV = 'uv==0.13.9'
FLAGS = {'find-links': '--find-links', 'index-url': '--index-url', 'extra-index-url': '--extra-index-url',
         'constraint': '--constraint'}


def pip_config(listing: str) -> dict[str, str]:
    "{key: value} of `pip config list` output (`scope.key='value'` lines); a later scope wins, as in pip."
    got = {}
    for line in listing.splitlines():
        key, sep, value = line.partition('=')
        if not sep: continue
        try: value = ' '.join(shlex.split(value))
        except ValueError: value = value.strip("'\"")
        got[key.rsplit('.', 1)[-1]] = value
    return got


def pip_settings(listing: str) -> list[str]:
    "uv flags for the package sources in `pip config list` output."
    got, out = pip_config(listing), []
    for name, flag in FLAGS.items():
        for v in got.get(name, '').split():
            u = urlparse(v)
            if u.scheme == 'file' and not Path(u.path).exists(): continue       # pip: "... is ignored: it is neither a file nor a directory"
            if not u.scheme and not Path(v).exists(): continue
            out += [flag, v]
    if got.get('no-index', '').lower() in ('1', 'true', 'yes', 'on'): out.append('--no-index')
    return out


def main(args: list[str]) -> int:
    py = sys.executable
    pip = [py, '-m', 'pip']
    if os.environ.get('EAGLE_NB_PIP') != 'pip':
        uv = Path(py).parent/'uv'
        if uv.exists() or subprocess.run([*pip, 'install', '-q', UV]).returncode == 0:
            listing = subprocess.run([*pip, 'config', 'list'], capture_output=True, text=True).stdout
            cmd = [str(uv), 'pip', 'install', '--python', py, '--compile-bytecode', '--index-strategy', 'unsafe-best-match', *pip_settings(listing), *args]
            cert = pip_config(listing).get('cert')
            env = {**os.environ, **({'SSL_CERT_FILE': cert} if cert and Path(cert).exists() else {})}   # pip's CA bundle
            if subprocess.run(cmd, env=env).returncode == 0: return 0
            print(f'uv could not install {" ".join(args)}; pip installs it instead', file=sys.stderr)
        else: print(f'{UV} could not be installed; pip installs instead', file=sys.stderr)
    return subprocess.run([*pip, 'install', *args]).returncode


if __name__ == '__main__':
    if sys.argv[1:2] != ['install']: sys.exit('usage: pip_install.py install ARGS (as for pip install)')
    sys.exit(main(sys.argv[2:]))
