"tests/run_all.py's queues: every engine unit runs once, no two units of one engine at the same time; a job waits for the jobs it needs."
import sys, threading, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
import run_all

def test_units_once_and_one_engine_at_a_time():
    units = [(['a1'], 'vllm'), (['a2'], 'vllm'), (['b1'], 'sglang'), (['b2'], 'sglang'), (['c'], None), (['d'], None)]
    q, lock, running, log = run_all.EngineQueue(units), threading.Lock(), [], []
    eng = {files[0]: e for files, e in units}
    def run(files):
        with lock:
            clash = [f for f in running if eng[f] is not None and eng[f] == eng[files[0]]]
            log.append((files[0], clash)); running.append(files[0])
        time.sleep(0.05)
        with lock: running.remove(files[0])
        return files[0]
    first = threading.Thread(target=lambda: out.extend(q.work(run)))
    out = []
    first.start(); time.sleep(0.02)          # the second worker joins late, as in run_all
    out2 = q.work(run); first.join()
    done = sorted(r for _, r, _ in out + out2)
    assert done == sorted(f[0] for f, _ in units)
    assert all(not clash for _, clash in log), log
    assert out and out2                      # both workers took units

def test_engine_files_are_the_units_files():
    assert run_all.REAL_ENGINE_FILES == [f for files, _ in run_all.ENGINE_UNITS for f in files]
    assert all((Path(__file__).parent/f'{n}.py').exists() for n in run_all.REAL_ENGINE_FILES)

def test_groups_cover_every_file_once_and_balance():
    secs = {'tests/a.py': 500, 'tests/b.py': 400, 'tests/c.py': 260, 'tests/d.py': 200, 'tests/e.py': 140, 'tests/f.py': 60}
    files = sorted(secs) + ['tests/new.py']                    # a file the table does not name counts DEFAULT_S
    groups = run_all.group_files(files, secs, target_s=300)
    assert sorted(f for g in groups for f in g) == files
    assert len(groups) == round((sum(secs.values()) + run_all.DEFAULT_S) / 300) == 5
    load = sorted(sum(secs.get(f, run_all.DEFAULT_S) for f in g) for g in groups)
    assert load[-1] == 500 and load[0] >= 200, load            # the longest file alone; none left nearly empty
    assert all(g == sorted(g) for g in groups)
    assert run_all.group_files(['tests/x.py'], {}, target_s=300) == [['tests/x.py']]

def test_lanes_take_the_longest_job_first():
    secs = {'nbs/a.ipynb': 30, 'nbs/b.ipynb': 250, 'tests/x.py': 100, 'tests/y.py': 200}
    jobs = [['nbs/a.ipynb'], ['nbs/b.ipynb'], ['tests/x.py', 'tests/y.py'], ['nbs/unknown.ipynb']]
    assert run_all.longest_first(jobs, secs) == [['tests/x.py', 'tests/y.py'], ['nbs/b.ipynb'], ['nbs/a.ipynb'], ['nbs/unknown.ipynb']]

def test_durations_table_names_existing_jobs():
    "The committed table is what orders the lanes: it names notebooks and test files that exist (a stale name only misleads)."
    secs = run_all.load_durations()
    root = Path(__file__).resolve().parents[1]
    assert secs and all((root/k).exists() for k in secs), [k for k in secs if not (root/k).exists()]

def test_junit_seconds_sum_per_file(tmp_path):
    x = tmp_path/'j.xml'
    x.write_text('<testsuites><testsuite><testcase classname="tests.test_a" name="t1" time="1.5"/>'
                 '<testcase classname="tests.test_a" name="t2" time="2"/><testcase classname="" name="x" time="0"/><testcase classname="tests.test_b" name="t" time="0.25"/>'
                 '</testsuite></testsuites>')
    assert run_all.junit_seconds(x) == {'tests/test_a.py': 3.5, 'tests/test_b.py': 0.25}

def test_a_job_waits_for_the_jobs_it_needs():
    "The docs test builds the site from the notebooks' executed copies: taken only once every notebook job has finished."
    jobs = [['tests/docs.py'], ['nbs/a.ipynb'], ['tests/x.py'], ['nbs/b.ipynb']]     # docs first in order: it must still wait
    q, lock = run_all.JobQueue(jobs, needs={'tests/docs.py': ['nbs/a.ipynb', 'nbs/b.ipynb']}), threading.Lock()
    ended, order, ended_before = [], [], {}
    def run(files):
        with lock: order.append(files[0]); ended_before[files[0]] = list(ended)
        time.sleep(0.15 if files[0] == 'nbs/b.ipynb' else 0.05)
        with lock: ended.append(files[0])
    ws = [threading.Thread(target=q.work, args=(run,)) for _ in range(2)]
    for w in ws: w.start()
    for w in ws: w.join(timeout=10)
    assert not any(w.is_alive() for w in ws)
    assert sorted(ended) == sorted(j[0] for j in jobs)
    assert {'nbs/a.ipynb', 'nbs/b.ipynb'} <= set(ended_before['tests/docs.py']), ended_before
    assert order[:3] == ['nbs/a.ipynb', 'tests/x.py', 'nbs/b.ipynb'] and order[-1] == 'tests/docs.py', order   # the ready ones in their order

def test_a_failed_job_still_counts_as_finished():
    q = run_all.JobQueue([['nbs/a.ipynb'], ['tests/docs.py']], needs={'tests/docs.py': ['nbs/a.ipynb']})
    ran = []
    def run(files):
        ran.append(files[0])
        if files[0] == 'nbs/a.ipynb': raise RuntimeError('notebook failed')
    try: q.work(run)
    except RuntimeError: pass
    q.work(run)                                # nothing waits forever on a job that failed
    assert ran == ['nbs/a.ipynb', 'tests/docs.py']

def test_the_docs_test_runs_after_the_notebooks():
    assert (Path(__file__).parent/f'{run_all.DOCS_TEST}.py').exists()

def test_one_lane_per_core():
    assert [run_all.default_lanes(c) for c in (1, 2, 16)] == [1, 2, 16]

def test_cpu_use_sees_a_busy_core():
    import os
    assert run_all.cpu_use(None) == 'CPU use not measured'
    t = run_all.cpu_ticks()
    if t is None: return                                    # no /proc/stat: nothing to read
    end = time.time() + 0.5
    while time.time() < end: pass                            # this process keeps one core busy
    line = run_all.cpu_use(t)
    busy = int(line.split('% busy')[0].split()[-1])
    assert busy >= 50 / os.cpu_count(), busy                 # at least half of one core's share, whatever else runs
    core_s = float(line.split(', ')[-1].split()[0].replace(',', ''))
    assert 0.25 <= core_s < 0.5 * os.cpu_count() + 1, line   # this process's half second at least half counted, no more than every core
