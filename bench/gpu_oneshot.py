#!/usr/bin/env python
"""The driver of bench/gpu_oneshot.sh: provision -> prepare -> extract -> train (probe, then sized) -> eval, each an
`eagle-nb` command in a subprocess, timed, sized to a wall budget, summed up in one JSON (tau, alpha_k, speed-up,
break-even, extraction and training tokens/s, tokens trained, stage seconds, disk, device, torch).

    python bench/gpu_oneshot.py --scale smoke|full [--budget-s S] [--json PATH] [--scratch DIR] [--set key=value ...]

Run it through bench/gpu_oneshot.sh (which finds the interpreter, stages carried wheels and sets PYTHONPATH); see
that file's header for the device-machine commands. Nothing here assumes CPU or CUDA: the stages pick the device.
"""
from __future__ import annotations
import argparse, json, math, os, platform, shutil, signal, statistics, subprocess, sys, threading, time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path: sys.path.insert(0, str(REPO))

# Sizes per scale. smoke: seconds of work on a 2-core CPU. full: an H200 within ~8 minutes (the budget decides the
# rest: extraction samples and training steps shrink to fit). The full preset's allowances are what the H200 showed on
# 2026-12-04 (bench/results/gpu_oneshot-h200-*.json): an extract stage spent 24-35 s beyond write_store's own clock
# (start-up, the target, the store's check), and write_store ran at 0.48-0.67 of the preflight's forward rate; a probe of
# 8 eager steps took 29 s; a train stage 23 s beyond its steps; compiling the loss kernel bought 6% (15,694 against
# 14,775 tokens/s) for 22 s more start-up, so a budget of minutes runs eager; plain decoding there took 18-45 ms a token.
PRESETS = {
    'smoke': dict(conversations=12, max_len=256, draft_vocab=4096, holdout=3, aux_dtype='bf16',
                  extract_token_budget=2048, extract_max_batch=16, epochs=1, batch_tokens=512, batch_samples=1, lr=1e-3,
                  ttt_steps=7, compile=False, probe_steps=3, profile_steps=0, profile_eval=False, eval_limit=2, max_new_tokens=24, num_steps=3,
                  prompts='sharegpt-heldout', budget_s=300, eval_reserve_s=120, eval_startup_s=10, train_overhead_s=20,
                  extract_overhead_s=10, extract_rate_factor=1.0, probe_reserve_s=15, extract_share=0.5, train_safety=0.9,
                  min_train_steps=3),
    'full':  dict(conversations=3000, max_len=2048, draft_vocab=32000, holdout=32, aux_dtype='fp8',
                  extract_token_budget=65536, extract_max_batch=64, epochs=2, batch_tokens=16384, batch_samples=0, lr=6e-4,
                  ttt_steps=7, compile=False, probe_steps=10, profile_steps=3, profile_eval=True, eval_limit=8, max_new_tokens=128, num_steps=3,
                  prompts='humaneval,sharegpt-heldout', budget_s=480, eval_reserve_s=110, eval_startup_s=30, train_overhead_s=25,
                  extract_overhead_s=35, extract_rate_factor=0.6, probe_reserve_s=35, extract_share=0.25,
                  train_safety=0.85,   # share of the measured step rate counted on (slower steps, the held-out pass)
                  min_train_steps=10), # trained even when the budget is overrun (the eval, bounded by time, gets what is left)
}
GRACE_S = 75          # a stage may run this long past the deadline before it is stopped (full: 480 + 75 s < a 600 s call)
NEEDED = ('transformers', 'tokenizers', 'safetensors', 'numpy', 'yaml', 'tqdm', 'pandas')

def fail(msg: str, code: int = 2):
    print(f"gpu_oneshot: error: {msg}", file=sys.stderr, flush=True); sys.exit(code)

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--scale', default=os.environ.get('SCALE', 'smoke'), choices=list(PRESETS))
    ap.add_argument('--target', default=os.environ.get('TARGET', 'smollm2-135m'), help='smollm2-135m, smoke (a tiny trained Llama), or an HF dir')
    ap.add_argument('--data', default=os.environ.get('DATA', 'sharegpt'), help='sharegpt, smoke (seeded conversations), or a .jsonl')
    ap.add_argument('--budget-s', type=float, default=float(os.environ['BUDGET_S']) if os.environ.get('BUDGET_S') else None)
    ap.add_argument('--json', default=os.environ.get('JSON', ''), help='the report (default $OUT/gpu_oneshot.json, else _runs/gpu_oneshot.json)')
    ap.add_argument('--scratch', default=os.environ.get('SCRATCH', ''), help='data, store, drafter (default $TMPDIR/eagle_nb_gpu_oneshot)')
    ap.add_argument('--keep', action='store_true', default=bool(os.environ.get('KEEP')), help='keep the store (default: deleted at the end)')
    ap.add_argument('--set', action='append', default=[], metavar='KEY=VALUE', help=f"override a size: {', '.join(PRESETS['full'])}")
    a = ap.parse_args(argv)
    sizes = dict(PRESETS[a.scale])
    for kv in a.set:
        k, _, v = kv.partition('=')
        if k not in sizes: fail(f"--set {kv}: unknown size {k!r}; known: {', '.join(sizes)}")
        d = sizes[k]
        sizes[k] = (v.lower() in ('1', 'true', 'yes')) if isinstance(d, bool) else type(d)(v)
    if a.budget_s: sizes['budget_s'] = a.budget_s
    a.sizes = sizes
    return a

# --- one `eagle-nb` stage in a subprocess, its output streamed, killed at the deadline --------------------------------
class Runner:
    def __init__(self, deadline: float, log_path: Path, on_stage=lambda: None):
        self.deadline, self.log, self.on_stage = deadline, open(log_path, 'a'), on_stage   # on_stage: write the JSON so far
        self.stages: dict = {}
        self.t0 = time.time()

    def beside(self, suffix: str) -> Path:
        "A file next to the log, named like the report: gpu_oneshot<suffix> (what comes back from the device machine with it)."
        log = Path(self.log.name)
        return log.with_name(log.stem + suffix)

    def say(self, msg: str):
        print(msg, flush=True); self.log.write(msg + '\n'); self.log.flush()

    def cli(self, name: str, argv: list[str], allow_rc=(0,)) -> dict:
        "Run `eagle-nb ARGV` as stage `name`; returns dict(seconds, rc, tail)."
        cmd = [sys.executable, '-c', 'import sys; from eagle_nb.cli import main; sys.exit(main())', *map(str, argv)]
        limit = max(10.0, self.deadline + GRACE_S - time.time())
        self.say(f"[{name}] eagle-nb {' '.join(map(str, argv))}")
        t0 = time.time(); tail: list[str] = []
        env = {**os.environ, 'TQDM_DISABLE': '1', 'EAGLE_NB_PROGRESS': '0'}   # a log, not a terminal: no progress bars
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, start_new_session=True, env=env)
        def pump():
            for line in p.stdout:
                line = line.rstrip('\n'); tail.append(line); del tail[:-40]
                self.say(f"  {line}")
        th = threading.Thread(target=pump, daemon=True); th.start()
        timed_out = False
        try: p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, signal.SIGINT)
            try: p.wait(timeout=20)
            except subprocess.TimeoutExpired: os.killpg(p.pid, signal.SIGKILL); p.wait()
        th.join(timeout=5)
        dt = time.time() - t0
        rec = dict(seconds=round(dt, 2), rc=p.returncode, timed_out=timed_out)
        self.stages[name] = rec                     # the JSON's record; the caller also gets the output's last lines
        self.say(f"[{name}] {'TIMED OUT' if timed_out else 'rc ' + str(p.returncode)} in {dt:.1f}s")
        self.on_stage()
        if timed_out: raise StageFailed(f"stage {name} ran past the budget (stopped after {dt:.0f}s); raise BUDGET_S or lower the sizes")
        if p.returncode not in allow_rc:
            raise StageFailed(f"stage {name} failed (rc {p.returncode}): {next((l for l in reversed(tail) if l.strip()), '')[:300]}")
        return dict(rec, tail=tail)

class StageFailed(Exception): pass

def du(path: Path) -> int:
    "Bytes under `path` (files only)."
    if not path.exists(): return 0
    return sum(f.stat().st_size for f in path.rglob('*') if f.is_file())

def device_info() -> dict:
    import torch
    from eagle_nb.core import pick_device
    dev = pick_device()
    import transformers
    d = dict(device=str(dev), torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
             python=platform.python_version(), cpu_count=os.cpu_count(), torch_threads=torch.get_num_threads())
    if dev.type == 'cuda':
        p = torch.cuda.get_device_properties(dev)
        d.update(name=torch.cuda.get_device_name(dev), memory_gib=round(p.total_memory / 2**30, 1), capability=f'{p.major}.{p.minor}')
    else: d.update(name=platform.processor() or platform.machine())
    return d

def check_python(scale: str):
    "One line naming what this interpreter lacks."
    missing = []
    for m in ('torch',) + NEEDED:
        try: __import__(m)
        except ImportError: missing.append(m)
    if missing:
        fail(f"{sys.executable} lacks {', '.join(missing)}; use an interpreter that has them (PYTHON=...), or carry their wheels "
             f"(pip download --no-deps into .gpu_carry/, see bench/gpu_oneshot.sh)")
    import torch
    if scale == 'full' and not torch.cuda.is_available() and not os.environ.get('ALLOW_CPU'):
        fail(f"SCALE=full needs CUDA: torch {torch.__version__} in {sys.executable} sees no GPU (cuda {torch.version.cuda}); "
             f"run SCALE=smoke on a CPU, or ALLOW_CPU=1 to try anyway")

def smoke_fixtures(run: Path, target: str, data: str, n: int) -> tuple[str, str]:
    "TARGET=smoke / DATA=smoke: the tests' tiny trained Llama (eagle_nb.train.smoke_target) and seeded conversations as JSONL."
    from eagle_nb.train import smoke_target, smoke_conversations
    if target == 'smoke': target = str(smoke_target(run/'smoke-target'))
    if data == 'smoke':
        p = run/'smoke-conversations.jsonl'
        p.write_text(''.join(json.dumps(c.to_json()) + '\n' for c in smoke_conversations(n, seed=0)))
        data = str(p)
    return target, data

def train_rates(metrics_path: Path) -> dict:
    "From a metrics.jsonl: median step seconds and tokens per step (the first steps, compile and warm-up, left out)."
    recs = [json.loads(l) for l in metrics_path.read_text().splitlines() if l.strip()] if metrics_path.exists() else []
    tr = [r for r in recs if r.get('kind') == 'train']
    if not tr: return {}
    steady = tr[len(tr) // 3:] or tr
    sec = statistics.median(r['seconds'] for r in steady)
    tok = statistics.mean(r['tokens'] for r in steady)
    return dict(steps=len(tr), step_s=sec, tokens_per_step=tok, tokens_per_s=tok / sec if sec else None,
                tokens=sum(r['tokens'] for r in tr), last=tr[-1])

def main(argv=None) -> int:
    a = parse_args(argv); z = a.sizes
    t_start = time.time()
    deadline = t_start + z['budget_s']
    out_dir = Path(os.environ['OUT']) if os.environ.get('OUT') else REPO/'_runs'
    json_path = Path(a.json) if a.json else out_dir/'gpu_oneshot.json'
    json_path.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(a.scratch or Path(os.environ.get('TMPDIR', '/tmp'))/'eagle_nb_gpu_oneshot')
    run = scratch/f"{a.scale}-{time.strftime('%Y%m%d-%H%M%S')}"
    run.mkdir(parents=True, exist_ok=True)
    R = Runner(deadline, json_path.with_suffix('.log'), on_stage=lambda: write())
    check_python(a.scale)
    dev = device_info()
    R.say(f"gpu_oneshot {a.scale}: {dev['name']} ({dev['device']}), torch {dev['torch']}, cuda {dev['cuda']}, "
          f"budget {z['budget_s']:.0f}s, scratch {run}, report {json_path}")
    doc = dict(format='eagle_nb.gpu_oneshot/1', scale=a.scale, ok=False, error=None, created=time.strftime('%Y-%m-%dT%H:%M:%S%z'),
               command=' '.join(sys.argv), commit=_git_commit(), device=dev, target=a.target, data=a.data, sizes=z, budget_s=z['budget_s'], scratch=str(run), stages=R.stages,
               summary={})
    def write():   # after every stage too: a run killed from outside still leaves what it measured
        doc['total_seconds'] = round(time.time() - t_start, 1)
        doc['within_budget'] = doc['total_seconds'] <= z['budget_s']
        doc.setdefault('disk', {})['scratch_bytes_at_end'] = du(run)
        doc['summary']['stage_seconds'] = {k: v['seconds'] for k, v in R.stages.items()}
        tmp = json_path.with_suffix('.json.partial')
        tmp.write_text(json.dumps(doc, indent=1, default=lambda o: str(o) if isinstance(o, Path) else None)); os.replace(tmp, json_path)
    try:
        body(a, z, R, run, doc, deadline)
        doc['ok'] = True
    except StageFailed as e:
        doc['error'] = str(e); R.say(f"gpu_oneshot: error: {e}")
    except Exception as e:   # the report still says how far it got
        doc['error'] = f'{type(e).__name__}: {e}'; R.say(f"gpu_oneshot: error: {doc['error']}")
    finally:
        store = run/'store'
        if store.exists() and not a.keep:
            doc.setdefault('disk', {})['store_deleted'] = True
            shutil.rmtree(store, ignore_errors=True)
        write()
    s = doc.get('summary') or {}
    f = lambda x, d=3: '?' if not isinstance(x, (int, float)) else f'{x:,.{d}f}'
    R.say(f"gpu_oneshot {a.scale}: {'ok' if doc['ok'] else 'FAILED'} in {doc['total_seconds']:.0f}s of {z['budget_s']:.0f}s; "
          f"tau {f(s.get('tau'))} (break-even {f(s.get('tau_break_even'))}), alpha {[None if x is None else round(x, 3) for x in s.get('alpha') or []]}, "
          f"speed-up {f(s.get('speedup'))}x; extract {f(s.get('extraction_tokens_per_s'), 0)} tok/s, "
          f"train {f(s.get('training_tokens_per_s'), 0)} tok/s, {f(s.get('tokens_trained'), 0)} tokens trained; {json_path}")
    return 0 if doc['ok'] else 1

def body(a, z: dict, R: Runner, run: Path, doc: dict, deadline: float):
    import torch
    left = lambda: deadline - time.time()
    S = doc['summary']                       # filled stage by stage: a run that fails late still reports the rates it measured
    target, data = a.target, a.data
    # --- provision (only the default target needs it; smoke fixtures are made here in seconds) --------------------
    if target == 'smollm2-135m':
        R.cli('provision', ['provision'])
    if 'smoke' in (target, data):
        t0 = time.time()
        target, data = smoke_fixtures(run, target, data, max(z['conversations'], 8))
        R.stages['smoke_fixtures'] = dict(seconds=round(time.time() - t0, 2), rc=0, timed_out=False)
    doc['target_path'] = target
    from eagle_nb.target import TargetInfo
    info = TargetInfo.of(target)
    doc['target_info'] = info.to_dict()
    # --- prepare ----------------------------------------------------------------------------------------------------
    dv = min(z['draft_vocab'], info.vocab_size)
    R.cli('prepare', ['prepare', '--data', data, '--target', target, '--max-len', z['max_len'], '--policy', 'split',
                      '--limit', z['conversations'], '--draft-vocab-size', dv, '--holdout', z['holdout'], '--out', run/'data'])
    from eagle_nb.data import TokenizedDataset
    ds = TokenizedDataset.open(run/'data', verify=False)
    lengths = [int(n) for n in ds.lengths]
    R.stages['prepare'].update(samples=len(lengths), tokens=sum(lengths), draft_vocab_size=dv)
    # --- extract preflight: this machine's forward rate on this data, and the disk -------------------------------------
    from eagle_nb.extract import ExtractConfig, preflight, _free_disk
    from eagle_nb.target import load_target
    t0 = time.time()
    tgt = load_target(target)
    xc = ExtractConfig(aux_dtype=z['aux_dtype'], token_budget=z['extract_token_budget'], max_batch=z['extract_max_batch'],
                       free_bytes=1 << 62, progress=False)
    pf = preflight(run/'data', tgt, run/'store', xc, verbose=True)   # free_bytes above: measure even what will not fit
    R.say("(the preflight's 'disk' row above is a placeholder; the plan below sizes the store against the real free disk)")
    del tgt
    if torch.cuda.is_available(): torch.cuda.empty_cache()
    free, _ = _free_disk(run)
    pa = {k: pf.attrs.get(k) for k in ('tokens', 'tokens_per_s', 'eta_s', 'need_bytes', 'samples')}
    R.stages['extract_preflight'] = dict(seconds=round(time.time() - t0, 2), rc=0, timed_out=False, free_bytes=free, **pa)
    # --- the plan: extraction share of what is left once every stage's fixed cost is set aside; train gets the rest ----
    work = left() - z['eval_reserve_s'] - z['train_overhead_s'] - z['extract_overhead_s'] - z['probe_reserve_s']
    if work <= 0: raise StageFailed(f"only {left():.0f}s of the {z['budget_s']:.0f}s budget left after prepare; raise BUDGET_S")
    rate = pa['tokens_per_s'] if pa['tokens_per_s'] and pa['tokens_per_s'] == pa['tokens_per_s'] else None
    if rate: rate *= z['extract_rate_factor']                   # the forward rate, less the writes the preflight does not time
    keep = len(lengths)
    if rate and pa['eta_s'] > z['extract_share'] * work:       # time: the first samples that fit the extraction share
        keep = min(keep, _fit(lengths, rate * z['extract_share'] * work))
    bpt = pa['need_bytes'] / max(pa['tokens'], 1)
    if pa['need_bytes'] * 1.1 > free:                          # disk: what fits with a 10% margin
        keep = min(keep, _fit(lengths, free / 1.1 / bpt))
    if keep < 1: raise StageFailed(f"no sample fits: {free / 2**30:.1f} GiB free at {bpt:.0f} bytes/token, {left():.0f}s left")
    ext_tokens = sum(lengths[:keep])
    ext_eta = ext_tokens / rate if rate else float('nan')
    train_tokens = sum(min(n, z['max_len']) for n in lengths[:keep]) * 0.95 * z['epochs']
    R.say(f"plan ({left():.0f}s of {z['budget_s']:.0f}s left):\n"
          f"  extract  {keep:,} of {len(lengths):,} samples, {ext_tokens:,} tokens at {rate or float('nan'):,.0f} tok/s (preflight x {z['extract_rate_factor']}) "
          f"~{ext_eta:.0f}s, store ~{ext_tokens * bpt / 2**30:.2f} GiB of {free / 2**30:.1f} GiB free\n"
          f"  train    up to {z['epochs']} epoch(s) = {train_tokens:,.0f} tokens; steps sized after a {z['probe_steps']}-step probe\n"
          f"  eval     {z['prompts']} x {z['eval_limit']} prompts, {z['max_new_tokens']} new tokens (reserve {z['eval_reserve_s']:.0f}s, "
          f"then bounded by the deadline)")
    doc['plan'] = dict(extract_samples=keep, extract_tokens=ext_tokens, extract_eta_s=ext_eta, bytes_per_token=bpt,
                       train_tokens_max=train_tokens)
    # --- extract ------------------------------------------------------------------------------------------------------
    xr = R.cli('extract', ['extract', '--data', run/'data', '--target', target, '--aux-dtype', z['aux_dtype'],
                      '--token-budget', z['extract_token_budget'], '--max-batch', z['extract_max_batch'],
                      '--limit', keep if keep < len(lengths) else 0, '--probe-batches', 0, '--out', run/'store'])
    from eagle_nb.store import HiddenStateStore
    store = HiddenStateStore.open(run/'store')
    st = R.stages['extract']
    st.update(samples=len(store), tokens=store.num_tokens, store_bytes=du(run/'store'))
    st['tokens_per_s'] = st['tokens'] / st['seconds']               # the stage's wall clock: loading the target included
    import re                                                        # write_store's own clock: forwards and writes only
    line = next((l for l in xr['tail'] if re.search(r'tokens in [\d.]+ s, [\d,]+ tokens/s', l)), '')
    mm = re.search(r'tokens in ([\d.]+) s, ([\d,]+) tokens/s', line)
    if mm: st.update(compute_seconds=float(mm.group(1)), compute_tokens_per_s=float(mm.group(2).replace(',', '')))
    del store
    doc.setdefault('disk', {}).update(store_bytes=st['store_bytes'], data_bytes=du(run/'data'), free_bytes_before=free)
    # extraction: write_store's clock (forwards + writes); the stage's wall clock, target loading included, beside it
    S.update(extraction_tokens_per_s=st.get('compute_tokens_per_s') or st['tokens_per_s'], extraction_stage_tokens_per_s=st['tokens_per_s'],
             extraction_tokens=st['tokens'])
    # --- train probe: the step rate of this drafter shape on this device -----------------------------------------------
    common = ['--store', run/'store', '--data', run/'data', '--ttt-steps', z['ttt_steps'], '--lr', z['lr'],
              '--batch-tokens', z['batch_tokens'], '--batch-samples', z['batch_samples'], '--max-len', z['max_len'],
              '--eval-fraction', 0.05, '--compile' if z['compile'] else '--no-compile']
    P = z['probe_steps']
    prof = ['--profile-steps', min(z['profile_steps'], P - 1)] if z['profile_steps'] and P > 1 else []   # where a step goes, for the record
    R.cli('train_probe', ['train', *common, '--steps', P, '--save-every', P, '--eval-samples', 4, *prof, '--no-resume', '--out', run/'probe'])
    if (run/'probe'/'profile.txt').exists():               # beside the report: the probe's profile of a training step
        prof_path = R.beside('_train_profile.txt')
        shutil.copy(run/'probe'/'profile.txt', prof_path); R.stages['train_probe']['profile'] = str(prof_path)
    pr = train_rates(run/'probe'/'metrics.jsonl')
    if not pr: raise StageFailed(f"train probe wrote no steps to {run/'probe'/'metrics.jsonl'}")
    overhead = max(0.0, R.stages['train_probe']['seconds'] - pr['step_s'] * pr['steps'])
    R.stages['train_probe'].update(step_s=pr['step_s'], tokens_per_step=pr['tokens_per_step'], tokens_per_s=pr['tokens_per_s'],
                                   overhead_s=round(overhead, 1))
    shutil.rmtree(run/'probe', ignore_errors=True)
    # --- train: as many steps as fit before the eval reserve (the probe's overhead counted once more) -------------------
    train_s = left() - z['eval_reserve_s'] - min(overhead, z['train_overhead_s'] * 2)
    epoch_steps = max(1, math.ceil(train_tokens / z['epochs'] / pr['tokens_per_step']))
    fit = int(z['train_safety'] * train_s / pr['step_s']) if train_s > 0 else 0
    if fit < z['min_train_steps']:    # over budget: a drafter of a few steps and a shorter eval beat no drafter at all
        R.say(f"over budget: {left():.0f}s left and an eval reserve of {z['eval_reserve_s']:.0f}s leave {max(fit, 0)} steps; "
              f"training {z['min_train_steps']} anyway, the eval (bounded by the deadline) gets what is left")
        fit = z['min_train_steps']
    steps = min(fit, epoch_steps * z['epochs'])
    R.say(f"train plan: {steps:,} steps (~{steps * pr['tokens_per_step']:,.0f} tokens, ~{steps * pr['step_s']:.0f}s at "
          f"{pr['tokens_per_s']:,.0f} tok/s; {z['epochs']} epoch(s) = ~{epoch_steps * z['epochs']:,} steps; probe overhead {overhead:.0f}s); "
          f"expected end ~{time.time() - R.t0 + steps * pr['step_s'] + overhead + z['eval_reserve_s']:.0f}s of {z['budget_s']:.0f}s")
    trr = R.cli('train', ['train', *common, '--steps', steps, '--save-every', max(steps, 1), '--no-resume', '--out', run/'drafter'])
    tr = train_rates(run/'drafter'/'metrics.jsonl')
    summary_line = next((l for l in reversed(trr['tail']) if l.startswith('{')), '{}')
    ts = json.loads(summary_line)
    R.stages['train'].update(steps=tr.get('steps'), tokens=tr.get('tokens'), step_tokens_per_s=tr.get('tokens_per_s'),
                             tokens_per_s=tr['tokens'] / R.stages['train']['seconds'] if tr else None,
                             heldout_acc=ts.get('heldout_acc'), tau_sim=ts.get('tau_sim'), loss=ts.get('loss'))
    # training: the median steady step (compile and warm-up steps left out); the stage's wall clock beside it
    S.update(training_tokens_per_s=R.stages['train']['step_tokens_per_s'], training_stage_tokens_per_s=R.stages['train']['tokens_per_s'],
             tokens_trained=R.stages['train']['tokens'], train_steps=R.stages['train']['steps'])
    doc['disk']['drafter_bytes'] = du(run/'drafter')
    doc['disk']['peak_bytes'] = sum(doc['disk'][k] for k in ('store_bytes', 'data_bytes', 'drafter_bytes'))
    # --- eval: in-process speculative decoding against plain greedy ----------------------------------------------------
    ev_path = run/'eval.json'
    ev_s = max(10.0, left() - z['eval_startup_s'])   # no prompt starts past the deadline (sets taken in turn; the report says how many ran)
    ev_prof = R.beside('_eval_profile.txt')   # where a decoding step goes, beside the report
    R.cli('eval', ['eval', '--target', target, '--drafter', run/'drafter', '--prompts', z['prompts'], '--dataset', run/'data',
                   '--limit', z['eval_limit'], '--max-new-tokens', z['max_new_tokens'], '--num-steps', z['num_steps'],
                   '--max-seconds', round(ev_s, 1), *(['--profile', ev_prof] if z['profile_eval'] else []), '--out', ev_path],
          allow_rc=(0, 1))   # 1: outputs differ from plain greedy beyond ties; reported as lossless false
    ev = json.loads(ev_path.read_text())
    m, sp, be = ev['metrics']['all'], ev['speed']['all'], ev['break_even']['all']
    R.stages['eval'].update(prompts=len(ev.get('prompts', [])), plain_tokens_per_s=sp.get('plain_tokens_per_s'),
                            spec_tokens_per_s=sp.get('spec_tokens_per_s'), time_limit=ev.get('time_limit'), profile=ev.get('profile'))
    doc_path = R.beside('_eval.json')   # beside the report: eval's own JSON
    shutil.copy(ev_path, doc_path)
    doc['eval'] = dict(metrics=m, speed=sp, break_even=be, by_set={k: v.get('accept_length') for k, v in ev['metrics']['by_set'].items()},
                       report=str(doc_path))
    S.update(tau=m.get('accept_length'), alpha=m.get('alpha'), speedup=sp.get('speedup'), lossless=sp.get('lossless'),
             lossless_up_to_ties=sp.get('lossless_up_to_ties'), tau_break_even=be.get('tau_break_even'))

def _git_commit() -> str|None:
    try: return subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError): return None

def _fit(lengths: list[int], tokens: float) -> int:
    "How many of the first samples fit in `tokens`."
    tot = 0
    for i, n in enumerate(lengths):
        tot += n
        if tot > tokens: return i
    return len(lengths)

if __name__ == '__main__':
    sys.exit(main())
