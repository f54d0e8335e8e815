"tests/run_all.py's engine queue: every unit runs once, and no two units of one engine run at the same time."
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
