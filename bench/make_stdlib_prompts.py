#!/usr/bin/env python
"""Write configs/prompts/stdlib.jsonl: 40 questions about Python standard-library functions, a prompt set that no
training data here touched (ShareGPT is chat, HumanEval is function bodies). Each prompt quotes the function's own
first docstring line, so the file is the same on any CPython 3.11+.

    python bench/make_stdlib_prompts.py [--out configs/prompts/stdlib.jsonl]
"""
import argparse, importlib, inspect, json
from pathlib import Path

NAMES = ['json.dumps', 'os.path.join', 're.sub', 'itertools.groupby', 'functools.lru_cache', 'collections.Counter',
         'collections.defaultdict', 'heapq.heappush', 'bisect.bisect_left', 'textwrap.dedent', 'shutil.copytree',
         'pathlib.Path.glob', 'subprocess.run', 'datetime.datetime.strptime', 'statistics.median', 'math.isclose',
         'random.sample', 'hashlib.sha256', 'base64.b64encode', 'csv.DictReader', 'zipfile.ZipFile', 'tempfile.mkdtemp',
         'argparse.ArgumentParser.add_argument', 'logging.basicConfig', 'contextlib.contextmanager', 'dataclasses.field',
         'enum.Enum', 'typing.NamedTuple', 'asyncio.gather', 'threading.Lock', 'concurrent.futures.ThreadPoolExecutor',
         'urllib.parse.urlparse', 'struct.pack', 'operator.itemgetter', 'glob.glob', 'difflib.unified_diff',
         'string.Template', 'sqlite3.connect', 'unittest.mock.patch', 'timeit.timeit']

def first_line(name: str) -> str:
    mod, *attrs = name.split('.')
    obj, i = None, len(attrs)
    while obj is None:   # the longest importable module prefix, then attributes
        try: obj = importlib.import_module('.'.join([mod, *attrs[:i]]) if i else mod)
        except ImportError: i -= 1
    for a in attrs[i:]: obj = getattr(obj, a)
    doc = (inspect.getdoc(obj) or '').strip().split('\n')[0].rstrip('.')
    return doc

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default=str(Path(__file__).resolve().parents[1]/'configs'/'prompts'/'stdlib.jsonl'))
    a = ap.parse_args()
    lines = []
    for i, n in enumerate(NAMES):
        doc = first_line(n)
        q = (f"In Python, what does `{n}` do? Its documentation begins: \"{doc}\". Explain it in a few sentences and "
             f"show a short example." if doc else f"In Python, what does `{n}` do? Explain it in a few sentences and show a short example.")
        lines.append(json.dumps(dict(id=f'stdlib-{i:02d}', prompt=q)))
    Path(a.out).write_text('\n'.join(lines) + '\n')
    print(f"{a.out}: {len(lines)} prompts")

if __name__ == '__main__': main()
