#!/usr/bin/env python
"""Every check and test of eagle_nb, ending with one plain `N passed, N failed` line.

1. notebooks are the source: `nbdev_export` and `nbdev_clean` leave no diff;
2. papermill conventions: each runnable notebook has exactly one `parameters` cell, literals only, whose names,
   types and help are the settings of the config it builds (NOTEBOOK_SETTINGS), and the profiles name only those;
3. `nbdev_test` on every notebook (cells flagged `slow` run too unless --fast; `cuda` only with a GPU);
4. pytest on tests/: the real-engine files in processes of their own (ENGINE_UNITS), beside the notebooks and the other files.

The notebooks and the other test files (in groups, one pytest process each) are jobs taken longest first by lanes
(`default_lanes`: one per core), with one OpenMP thread each; the real-engine units run beside them in one more.
`--write-durations` records what each job took (tests/durations.json, the only thing the order is read from).
"""
import argparse, ast, hashlib, json, os, subprocess, sys, time, xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT/'nbs'
BIN = Path(sys.executable).parent
# Notebooks papermill runs as reports (make demo); each must have exactly one `parameters` cell.
RUNNABLE = ['00_data.ipynb', '01_extract.ipynb', '02_diagnostics.ipynb', '03_train.ipynb', '04_eval.ipynb']

# Settings are defined once: each runnable notebook's parameters are the settings of the config it builds (the field's
# name, type and `# comment` as help; the notebook builds it with eagle_nb.core.config_from_notebook), plus the page's own
# run parameters named here. (module, config or function) or None for a page that builds none.
NOTEBOOK_SETTINGS = {
    '00_data.ipynb': (('eagle_nb.data', 'PrepareConfig'), ['metrics_out']),
    '01_extract.ipynb': (('eagle_nb.extract', 'ExtractConfig'), ['target', 'data', 'out', 'metrics_out']),
    '02_diagnostics.ipynb': (('eagle_nb.diagnostics', 'diagnose_store'), ['demo_target', 'n_samples', 'min_tokens', 'max_tokens', 'seed',
                                                                     'smollm2_samples', 'metrics_out']),
    '03_train.ipynb': (('eagle_nb.train', 'TrainConfig'), ['plot_every', 'metrics_out']),
    '04_eval.ipynb': (('eagle_nb.eval', 'EvalConfig'), ['out', 'metrics_out']),
}
# One name per thing the stages pass between them (the profiles in configs/ tie them together): never these aliases.
ALIASES = {'target_name': 'target', 'model': 'target', 'target_dir': 'target', 'out_dir': 'out', 'output': 'out',
           'output_dir': 'out', 'store_dir': 'store', 'store_path': 'store', 'data_dir': 'data'}

results = []  # (name, ok, detail)
T0 = time.time()
def stamp() -> str:
    "Minutes:seconds since the run began, on each line that says a job ended (with its duration: when it ran, on which lane)."
    m, s = divmod(int(time.time() - T0), 60)
    return f'[{m:02d}:{s:02d}]'

def record(name, ok, detail=''):
    results.append((name, ok, detail))
    print(f"{stamp()} {'PASS' if ok else 'FAIL'}  {name}" + (f"  -- {detail}" if detail and not ok else ''), flush=True)

def snapshot(paths):
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}

def check_no_diff(name, cmd, glob):
    before = snapshot(sorted(glob()))
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    after = snapshot(sorted(glob()))
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    ok = r.returncode == 0 and not changed
    detail = (r.stderr.strip().splitlines() or [''])[-1] if r.returncode else f"changed: {', '.join(Path(c).name for c in changed)}"
    record(name, ok, detail + (' (run `make export` and commit)' if changed else ''))

def parameters_problems(nb_path, must_have):
    nb = json.loads(nb_path.read_text())
    cells = [c for c in nb['cells'] if 'parameters' in c.get('metadata', {}).get('tags', [])]
    if must_have and len(cells) != 1: return [f"{nb_path.name}: {len(cells)} `parameters` cells, want exactly 1"]
    if not must_have and len(cells) > 1: return [f"{nb_path.name}: {len(cells)} `parameters` cells, want at most 1"]
    probs = []
    for c in cells:
        src = ''.join(c['source'])
        if '#| export' in src: probs.append(f"{nb_path.name}: the parameters cell must not be exported")
        try: tree = ast.parse(src)
        except SyntaxError as e: probs.append(f"{nb_path.name}: parameters cell: {e}"); continue
        try:  # what papermill itself sees (`papermill --help-notebook`): a line with a second '=' is dropped
            from papermill.translators import PythonTranslator
            seen = {p.name for p in PythonTranslator.inspect({'source': src})}
        except Exception as e: seen = None; probs.append(f"{nb_path.name}: papermill cannot inspect parameters ({e})")
        for node in tree.body:
            if seen is not None and isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id not in seen:
                probs.append(f"{nb_path.name}:{node.lineno}: papermill cannot parse `{node.target.id}` (no '=' allowed in the help comment)")
            if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
                probs.append(f"{nb_path.name}:{node.lineno}: parameters must be `name: type = literal  # help`"); continue
            try: ast.literal_eval(node.value)
            except Exception: probs.append(f"{nb_path.name}:{node.lineno}: {node.target.id} is not a literal")
    if must_have and nb.get('metadata', {}).get('kernelspec', {}).get('name') != 'python3':
        probs.append(f"{nb_path.name}: metadata.kernelspec.name must be python3 (papermill needs a kernel)")
    return probs

def papermill_help(text: str) -> str:
    "A setting's help as a papermill parameter line can carry it (a second '=' on the line hides the parameter)."
    import re
    return re.sub(r'\s+=\s+', ': ', text)

def settings_problems(nbs=NBS, table=None, profiles=None) -> list[str]:
    "Where a runnable notebook's parameters are not its config's settings (names, types, help), or a profile names others."
    import importlib, re
    if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))
    from eagle_nb.core import setting_names, field_help, _flag_type
    import inspect, dataclasses
    probs, table = [], NOTEBOOK_SETTINGS if table is None else table
    declared_by = {}
    for name, (source, run_params) in table.items():
        nb = json.loads((Path(nbs)/name).read_text())
        cells = [c for c in nb['cells'] if c['cell_type'] == 'code']
        pcell = [c for c in cells if 'parameters' in c.get('metadata', {}).get('tags', [])]
        if len(pcell) != 1: probs.append(f"{name}: {len(pcell)} parameters cells"); continue
        body = ast.parse(''.join(pcell[0]['source'])).body
        params = {n.target.id: (n, ''.join(pcell[0]['source']).splitlines()[n.lineno - 1]) for n in body if isinstance(n, ast.AnnAssign)}
        declared_by[name] = set(params)
        settings, helps, types = [], {}, {}
        if source:
            obj = getattr(importlib.import_module(source[0]), source[1])
            settings, helps = setting_names(obj), field_help(obj)
            types = ({f.name: _flag_type(f.type).__name__ for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj)
                     else {k: _flag_type(v.annotation).__name__ for k, v in inspect.signature(obj).parameters.items()})
        for k in run_params:
            if k in settings: probs.append(f"{name}: run parameter `{k}` is also a {source[1]} setting; drop it from NOTEBOOK_SETTINGS")
            if k not in params: probs.append(f"{name}: NOTEBOOK_SETTINGS lists `{k}`, the parameters cell has no such parameter")
        for k, (node, line) in params.items():
            if k in ALIASES: probs.append(f"{name}: parameter `{k}`: call it `{ALIASES[k]}`, as the other stages do")
            if k in run_params: continue
            if k not in settings:
                probs.append(f"{name}: parameter `{k}` is not a setting of {source[1] if source else 'this page'}"
                             + (f" ({', '.join(settings)}); rename it to the field it sets, or add it to NOTEBOOK_SETTINGS" if source else '; add it to NOTEBOOK_SETTINGS'))
                continue
            ann = ast.unparse(node.annotation)
            if ann != types[k]: probs.append(f"{name}: parameter `{k}: {ann}`, but {source[1]}.{k} is {types[k]}")
            want, got = papermill_help(helps.get(k, '')), (line.split('#', 1)[1].strip() if '#' in line else '')
            if '=' in want: probs.append(f"{source[1]}.{k}: its help holds '=' ({want!r}), which papermill cannot carry; rephrase the comment")
            elif got != want: probs.append(f"{name}: parameter `{k}` help {got!r}; the help is {source[1]}.{k}'s comment: {want!r}")
        if source:   # built from the parameters, and no cell between them and the build rebinds one of their names
            after = cells[cells.index(pcell[0]) + 1:]
            build = next((i for i, c in enumerate(after) if re.search(rf"config_from_notebook\(\s*{source[1]}\s*,\s*'{re.escape(name)}'", ''.join(c['source']))), None)
            if build is None: probs.append(f"{name}: no cell builds {source[1]} with config_from_notebook({source[1]}, '{name}', globals())")
        cut = cells.index(pcell[0])
        for c in cells[cut + 1:] if not source or build is None else cells[cut + 1:cut + 1 + build]:
            try: tree = ast.parse('\n'.join(l for l in ''.join(c['source']).splitlines() if not l.lstrip().startswith(('%', '!'))))
            except SyntaxError: continue
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)): continue
                bound = {x.id for x in ast.walk(node) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store)}
                bound |= {(a.asname or a.name).split('.')[0] for a in getattr(node, 'names', [])} if isinstance(node, (ast.Import, ast.ImportFrom)) else set()
                for k in sorted(bound & set(params)):
                    probs.append(f"{name}: a cell after the parameters cell rebinds `{k}` before the config is built; rename that variable")
    if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))
    from eagle_nb.pipeline import load_profile
    for prof in sorted((ROOT/'configs').glob('*.yaml')) if profiles is None else profiles:
        for st in load_profile(str(prof), ROOT)['stages']:
            if st['notebook'] not in declared_by: continue
            for k in sorted(set(st['parameters']) - declared_by[st['notebook']]):
                probs.append(f"{Path(prof).name}: stage {st['name']}: `{k}` is not a parameter of {st['notebook']}")
    return probs

NB_TEST = ('import sys; from eagle_nb.docs import check_notebook; '
           'print(f"- Completed {sys.argv[1]} ({check_notebook(sys.argv[1], sys.argv[2].split()):.0f}s)")')

def run_nb(args):
    """nbdev_test one notebook in its own process (state never leaks between notebooks), through `eagle_nb.docs.check_notebook`:
    nbdev_test's own run of it, whose executed copy the site's cache keeps, so the docs test builds the site without executing
    every notebook a second time (in fast mode, skipping the `slow` cells: 150-400 s of a fresh clone's make test).
    Two notebooks run at once on a 2-core machine, so each gets one OpenMP thread: two processes with two
    spinning OpenMP threads each run 10-100x slower than with one."""
    path, flags = args
    t0 = time.time()
    cmd = [sys.executable, '-c', NB_TEST, str(path), ' '.join(flags)]
    r = subprocess.run(cmd, cwd=ROOT/'nbs', capture_output=True, text=True, env={**os.environ, 'EAGLE_NB_PROGRESS': '0', 'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS', '1')})
    if r.returncode: print(r.stdout[-6000:], r.stderr[-6000:], sep='\n', flush=True)
    return str(path), r.returncode == 0, time.time() - t0

# The real-engine test files, in units: a unit's files run in one pytest process, in this order, because they share a server
# through conftest.py (sglang_cli_store: _cli and _vs_vllm; vllm_extract_server: _vs_vllm and test_vllm_extract, whose last
# test kills it), so it is started once and stopped right after. Longest first (a fresh-clone make test's durations); each
# unit's engine, of which at most one unit runs at a time: two vLLM units together would hold 4 vLLM servers (the failover
# test's 2 and test_vllm_eval's 2), each taking 0.15 of host memory for its KV cache alone, on a 24 GB machine.
ENGINE_UNITS = [(['test_sglang_real_cli', 'test_sglang_real_vs_vllm', 'test_vllm_extract'], 'vllm'), (['test_vllm_eval'], 'vllm'),
                (['test_sglang_real_faults'], 'sglang'), (['test_sglang_real'], 'sglang'), (['test_sglang_real_export'], 'sglang'),
                (['test_engine_server_signals'], None)]
REAL_ENGINE_FILES = [f for files, _ in ENGINE_UNITS for f in files]
DOCS_TEST = 'test_docs_browser'   # builds the site: after the notebooks, whose executed copies it uses


class JobQueue:
    """Jobs (each a list of the files it runs) taken in their order by workers; `needs`: {a job's first file: the files of the
    jobs that must have finished before it is taken}. A worker that finds no job ready waits for one to finish."""
    def __init__(self, jobs, needs: dict[str, list[str]]|None = None):
        import threading
        self.todo, self.needs, self.finished, self.cv = list(jobs), needs or {}, set(), threading.Condition()

    def take(self):
        with self.cv:
            while self.todo:
                i = next((i for i, j in enumerate(self.todo) if set(self.needs.get(j[0], ())) <= self.finished), None)
                if i is not None: return self.todo.pop(i)
                self.cv.wait()
            return None

    def done(self, job):
        with self.cv: self.finished.update(job); self.cv.notify_all()

    def work(self, run):
        "Run jobs with `run(files)` until none is left (a job that raises counts as finished: its result is reported by `run`)."
        while (job := self.take()) is not None:
            try: run(job)
            finally: self.done(job)


class EngineQueue:
    """The engine units, taken by workers: the first worker from the start, a second once the notebooks and the other test
    files are done (their process would otherwise leave a core idle while one engine process waits on a server start-up).
    A worker takes the first unit whose engine no other worker is running, and waits while there is none."""
    def __init__(self, units):
        import threading
        self.todo, self.busy, self.cv = list(units), [], threading.Condition()

    def take(self):
        with self.cv:
            while True:
                if not self.todo: return None
                i = next((i for i, (_, eng) in enumerate(self.todo) if eng is None or eng not in self.busy), None)
                if i is not None:
                    unit = self.todo.pop(i); self.busy.append(unit[1]); return unit
                self.cv.wait()

    def done(self, unit):
        with self.cv: self.busy.remove(unit[1]); self.cv.notify_all()

    def work(self, run):
        "Run units with `run(files)` until none is left; [(files, result, seconds)]."
        out = []
        while (unit := self.take()) is not None:
            t0 = time.time()
            try: out.append((unit[0], run(unit[0]), time.time() - t0))
            finally: self.done(unit)
        return out

def run_pytest(tag: str, files: list[str], a, stream: bool = False, env: dict|None = None) -> tuple[int, tuple[int, int, int], str]:
    "(exit code, (passed, failed, skipped), its output unless streamed) of one pytest process over `files`."
    xml = ROOT/'.pytest_cache'/f'junit-{tag}.xml'
    xml.parent.mkdir(exist_ok=True); xml.unlink(missing_ok=True)
    cmd = [sys.executable, '-m', 'pytest', '-q', *files, f'--junitxml={xml}', '-p', 'no:cacheprovider', '--durations=15']
    if a.fast: cmd += ['-m', 'not slow']
    if a.only: cmd += ['-k', a.only]
    env = None if env is None else {**os.environ, **env}
    if stream: r = subprocess.run(cmd, cwd=ROOT, env=env); out = ''
    else: r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env); out = r.stdout + r.stderr
    n_pass = n_fail = n_skip = 0
    if xml.exists():
        for s in ET.parse(xml).getroot().iter('testsuite'):
            tests, fails, errs, skips = (int(s.get(k, 0)) for k in ('tests', 'failures', 'errors', 'skipped'))
            n_fail += fails + errs; n_skip += skips; n_pass += tests - fails - errs - skips
    if r.returncode not in (0, 5) and n_fail == 0: n_fail = 1  # pytest itself broke
    return r.returncode, (n_pass, n_fail, n_skip), out

# Lanes: what a job took in a fresh-clone `make test` (tests/durations.json, keys `nbs/X.ipynb` and `tests/X.py`) decides the
# order jobs are taken in (longest first) and how the test files are grouped; nothing else reads it. A file it does not
# name counts as DEFAULT_S. Each group of test files is one pytest process (a process start costs seconds of imports).
DURATIONS = ROOT/'tests'/'durations.json'
DEFAULT_S, GROUP_S = 10.0, 450.0

def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try: return json.loads(Path(path).read_text())
    except FileNotFoundError: return {}

def group_files(files: list[str], seconds: dict[str, float], target_s: float = GROUP_S) -> list[list[str]]:
    "Test files in groups of about `target_s` each (greedy, longest first into the lightest group); each group in name order."
    cost = lambda f: seconds.get(f, DEFAULT_S)
    n = max(1, min(len(files), round(sum(map(cost, files)) / target_s)))
    groups = [[0.0, []] for _ in range(n)]
    for f in sorted(files, key=lambda f: (-cost(f), f)):
        g = min(groups, key=lambda g: g[0]); g[0] += cost(f); g[1].append(f)
    return [sorted(g[1]) for g in groups if g[1]]

def longest_first(jobs: list, seconds: dict[str, float]) -> list:
    "Jobs (each a list of the files it runs) in the order lanes take them: the longest expected first, ties by name."
    return sorted(jobs, key=lambda files: (-sum(seconds.get(f, DEFAULT_S) for f in files), files))

def default_lanes(cpus: int|None = None) -> int:
    """Lanes for the notebooks and test files: one per core. One more on 2 cores was slower, not faster: the machine was already
    saturated (vmstat: 0% idle from the first test to the last; `time make test`'s 1.44 cores busy left out the servers'
    orphaned workers), every job ran longer, and a test with a 3-second limit failed under the extra contention."""
    return max(1, cpus or os.cpu_count() or 1)

def cpu_ticks() -> tuple[int, int]|None:
    "(busy, total) clock ticks of the whole machine since boot (/proc/stat; time stolen by a hypervisor left out), or None."
    try: f = [int(x) for x in Path('/proc/stat').read_text().split('\n', 1)[0].split()[1:]]
    except (OSError, ValueError): return None
    idle = f[3] + (f[4] if len(f) > 4 else 0)        # idle + iowait
    return sum(f[:7]) - idle, sum(f[:7])              # user nice system idle iowait irq softirq

def cpu_use(before: tuple[int, int]|None) -> str:
    "How busy the machine's cores were since `before` (`cpu_ticks()`): every process, the servers' workers included."
    now = cpu_ticks()
    if before is None or now is None or now[1] == before[1]: return 'CPU use not measured'
    busy = (now[0] - before[0]) / (now[1] - before[1])
    # and the busy core-seconds: two runs of one commit took 38.5 and 53.7 min of user time (28 and 38 min of wall time) on
    # this kind of machine, both with the cores ~97% busy; between runs of one commit, more core-seconds is a slower host
    return f'the {os.cpu_count()} cores {busy:.0%} busy on average, {(now[0] - before[0]) / os.sysconf("SC_CLK_TCK"):,.1f} core-seconds'

def junit_seconds(xml: Path) -> dict[str, float]:
    "Seconds per test file (setup, call and teardown) in one pytest junit file."
    out = {}
    for tc in ET.parse(xml).getroot().iter('testcase'):
        if not tc.get('classname'): continue          # a module skipped at collection
        f = 'tests/' + tc.get('classname').split('.')[-1] + '.py'
        out[f] = out.get(f, 0.0) + float(tc.get('time', 0))
    return out

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--fast', action='store_true', help='skip `slow` notebook cells and pytest marked slow')
    ap.add_argument('--only', default='', help='only notebooks/tests whose name contains this')
    ap.add_argument('--lanes', type=int, default=0, help='lanes for the notebooks and test files (default: default_lanes())')
    ap.add_argument('--serial', action='store_true', help='one pytest process after the notebooks (no real-engine process beside them)')
    ap.add_argument('--write-durations', action='store_true', help=f'record what each notebook and test file took in {DURATIONS.relative_to(ROOT)}')
    a = ap.parse_args()
    t0, ticks0 = T0, cpu_ticks()          # the run's start: the stamps count from it
    os.environ['EAGLE_NB_PROGRESS'] = '0'
    if not a.only:
        check_no_diff('nbdev_export leaves no diff', [str(BIN/'nbdev_export')], lambda: (ROOT/'eagle_nb').glob('*.py'))
        check_no_diff('nbdev_clean leaves no diff', [str(BIN/'nbdev_clean')], lambda: NBS.glob('*.ipynb'))
        probs = []
        for nb in sorted(NBS.glob('*.ipynb')):
            probs += parameters_problems(nb, nb.name in RUNNABLE)
        missing = [n for n in RUNNABLE if not (NBS/n).exists()]
        record('papermill parameters cells', not probs, '; '.join(probs))
        sp = settings_problems()
        record('notebook parameters are their config\'s settings', not sp, '; '.join(sp))
        if missing: print(f"note: runnable notebooks not written yet: {', '.join(missing)}")

    # The real-engine test files (vLLM / SGLang servers on 127.0.0.1) run in pytest processes of their own, one unit of
    # ENGINE_UNITS each, started now beside the other jobs: a lone engine process kept this 2-core machine 0.9 busy, mostly
    # waiting on one server start-up at a time. A second engine worker joins when the other jobs are done.
    # The other jobs: each notebook (nbdev_test, a process of its own) and the other test files in groups of about GROUP_S,
    # one pytest process each, taken longest first by the lanes. One pytest process after the notebooks kept one core idle
    # most of the time (the tests on tiny models run one thread): 40 of 54 minutes on a Zen 3.
    seconds = load_durations()
    rest_files = sorted(f'tests/{p.name}' for p in (ROOT/'tests').glob('test_*.py') if p.stem not in REAL_ENGINE_FILES + [DOCS_TEST])
    queue = EngineQueue(ENGINE_UNITS)
    def run_unit(names):   # a stale name fails pytest loudly, never dropped
        res = run_pytest(f'engines-{names[0]}', [f'tests/{n}.py' for n in names], a)
        print(f"{stamp()} real-engine unit done: {', '.join(names)} ({sum(res[1])} tests)", flush=True)
        return res
    pool = ThreadPoolExecutor(max_workers=2)
    engines = [] if a.serial else [pool.submit(queue.work, run_unit)]

    import torch
    flags = [] if a.fast else ['slow']
    if torch.cuda.is_available(): flags.append('cuda')
    nbs = [f'nbs/{p.name}' for p in sorted(NBS.glob('*.ipynb')) if a.only in p.name]
    docs = [f'tests/{DOCS_TEST}.py'] if (ROOT/'tests'/f'{DOCS_TEST}.py').exists() else []
    # the docs test builds the site from the notebooks' executed copies (run_nb): a job of its own, after every notebook
    groups = [rest_files + docs if engines else ['tests']] if a.serial else group_files(rest_files, seconds) + ([docs] if docs else [])
    one_thread = {'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS', '1')}
    runs, took = [], {}
    def timed(tag):   # what each file of one pytest process took, from its junit file (run_pytest names it)
        xml = ROOT/'.pytest_cache'/f'junit-{tag}.xml'
        if xml.exists(): took.update(junit_seconds(xml))
    def run_job(files):
        if files[0].endswith('.ipynb'):
            path, ok, dt = run_nb((ROOT/files[0], flags))
            record(f'nbdev_test {Path(path).name} ({dt:.0f}s)', ok); took[files[0]] = dt
            return
        tag = 'rest' if len(groups) == 1 else f'rest-{groups.index(files) + 1}'
        t0 = time.time()
        res = run_pytest(tag, files, a, stream=a.serial, env=None if a.serial else one_thread)   # in lanes, printed when done
        runs.append(res)
        print(f"\n{stamp()} ==== pytest: {tag} ({len(files)} files, {time.time() - t0:.0f}s) ====\n{res[2]}", flush=True)
        timed(tag)
    lanes = a.lanes or default_lanes()
    print(f'{lanes} lanes for the notebooks and test files, beside the real-engine units', flush=True)
    with ThreadPoolExecutor(max_workers=lanes) as ex:
        if a.serial:   # the notebooks two at a time, then one pytest process
            list(ex.map(run_job, [[n] for n in nbs])); run_job(groups[0])
        else:
            jobs = JobQueue(longest_first([[n] for n in nbs] + groups, seconds), needs={docs[0]: nbs} if docs else None)
            for f in [ex.submit(jobs.work, run_job) for _ in range(lanes)]: f.result()
    if engines:
        engines.append(pool.submit(queue.work, run_unit))
        for files, res, dt in [u for f in engines for u in f.result()]:
            runs.append(res)
            print(f"\n==== pytest: real engines ({', '.join(files)}: {dt:.0f}s) ====\n{res[2]}", flush=True)
            timed(f'engines-{files[0]}')
    pool.shutdown()
    n_pass, n_fail, n_skip = (sum(counts[k] for _, counts, _ in runs) for k in range(3))
    passed = sum(ok for _, ok, _ in results) + n_pass
    failed = sum(not ok for _, ok, _ in results) + n_fail
    print(f"\nfailed checks: {', '.join(n for n, ok, _ in results if not ok)}" if any(not ok for _, ok, _ in results) else '')
    print(f"total time {time.time()-t0:.0f}s ({cpu_use(ticks0)})")
    if a.write_durations:
        DURATIONS.write_text(json.dumps(dict(sorted({**seconds, **{k: round(v, 1) for k, v in took.items()}}.items())), indent=1) + '\n')
        print(f'wrote {DURATIONS.relative_to(ROOT)} ({len(took)} jobs and files timed)')
    print(f"{passed} passed, {failed} failed" + (f", {n_skip} skipped" if n_skip else ''))
    return 1 if failed else 0

if __name__ == '__main__':
    sys.exit(main())
