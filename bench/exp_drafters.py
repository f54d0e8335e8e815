#!/usr/bin/env python
"""Three SmolLM2 drafters at one training budget, evaluated by real speculative decoding on held-out prompts.

  orig  - ShareGPT first exchanges (user turn + the original ShareGPT answer), states extracted in process (correct).
  vllm  - the same samples, but the states come through the seed's mistake: vLLM is given SpecForge-numbered aux ids
          (1, 14, 26: "output of layer k") which it reads as HF indices, so each tap is one layer early; the files are
          imported with the ids the user meant (2, 15, 27, 30) -> a store labelled [2, 15, 27] that holds [1, 14, 26].
          Serving feeds the drafter the correct taps [2, 15, 27] (issue 6, part 5).
  delta - (stage `delta`, drafter `delta`) the right ids, but vLLM's `hidden_states` kept without the residual: the MLP
          output of layers 1, 14, 26 alone - the seed's "residual vs. delta capture".
  regen - the same user turns answered by SmolLM2 itself (`eagle-nb regenerate`, greedy), correct states (issue 8, part 4).

All three: the same prompts, the same optimizer steps x padded tokens per step, the same seed and flags. Evaluated with
`eagle-nb eval` (greedy, chain of 3 drafts; the orig drafter also with a tree) on held-out ShareGPT prompts (the same
held-out ids for all, never trained on) and HumanEval. The diagnosis of the mismatched store is `eagle-nb diagnose`
against an all-layer reference. Every stage is a plain `eagle-nb` command (printed) or a short capture for the vLLM
files; stages whose output is complete are reused, so an interrupted run continues. Results: WORK/results.json, and
`--report` copies them to bench/results/exp_drafters.json for the notebook.

    python bench/exp_drafters.py [--stages convs,orig,vllm,regen,train,eval,report] [--conversations 264] [--steps 128]
    python bench/exp_drafters.py --steps 384 --work _runs/exp-drafters-s384 --reuse _runs/exp-drafters --stages train,eval,report

Stages can run in two processes at once (e.g. `--stages regen` beside `--stages orig,vllm`), one thread each.
"""
import argparse, json, os, shlex, shutil, subprocess, sys, time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
ap.add_argument('--stages', default='convs,orig,vllm,regen,train,eval,report', help='comma-separated stages to run')
ap.add_argument('--drafters', default='orig,vllm,regen', help='drafters the train/eval stages handle')
ap.add_argument('--conversations', type=int, default=264, help='first exchanges taken from ShareGPT (incl. held-out)')
ap.add_argument('--holdout', type=int, default=24, help='held-out conversations (eval prompts, never trained on)')
ap.add_argument('--max-prompt-tokens', type=int, default=256, help='user turns longer than this are skipped')
ap.add_argument('--max-new-tokens', type=int, default=192, help='regenerated answer length cap')
ap.add_argument('--max-len', type=int, default=512, help='training sample length (truncate)')
ap.add_argument('--draft-vocab', type=int, default=8192)
ap.add_argument('--steps', type=int, default=128, help='optimizer steps for every drafter')
ap.add_argument('--batch-tokens', type=int, default=1024, help='padded tokens per step (same for every drafter)')
ap.add_argument('--lr', type=float, default=3e-3)
ap.add_argument('--eval-limit', type=int, default=10, help='prompts per eval set')
ap.add_argument('--eval-new-tokens', type=int, default=96)
ap.add_argument('--work', default='', help='work directory (default: _runs/exp-drafters)')
ap.add_argument('--reuse', default='', help='another work directory whose datasets, stores and diagnosis to link (another budget, same data)')
a = ap.parse_args()

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
W = Path(a.work) if a.work else ROOT/'_runs'/'exp-drafters'
W.mkdir(parents=True, exist_ok=True)
if a.reuse:
    for n in ('orig.jsonl', 'regen.jsonl', 'regen.manifest.json', 'data-orig', 'data-regen', 'store-orig', 'store-vllm',
              'store-delta', 'store-regen', 'store-ref-all', 'diagnose.json', 'diagnose-delta.json'):
        if (Path(a.reuse)/n).exists() and not (W/n).exists(): (W/n).symlink_to((Path(a.reuse)/n).resolve())
env = {**os.environ, 'EAGLE_NB_PROGRESS': os.environ.get('EAGLE_NB_PROGRESS', '0')}
stages = a.stages.split(',')
drafters = a.drafters.split(',')
times_path = W/'times.json'

def log_time(name, dt):
    t = json.loads(times_path.read_text()) if times_path.exists() else {}
    t[name] = round(dt, 1); times_path.write_text(json.dumps(t, indent=1))

def run(name, args, out=None):
    cmd = [str(BIN/'eagle-nb'), *map(str, args)]
    print(f"\n== {name}: {shlex.join(['eagle-nb', *map(str, args)])}", flush=True)
    t0 = time.time()
    r = subprocess.run(cmd, env=env, cwd=ROOT, text=True, capture_output=True)
    dt = time.time() - t0
    (W/f'{name}.log').write_text(r.stdout + '\n--- stderr\n' + r.stderr)
    if r.returncode not in (0, 1) or (r.returncode == 1 and not name.startswith(('eval', 'diagnose'))):   # 1: not lossless / unusable store
        print(r.stdout[-3000:], r.stderr[-3000:], sep='\n'); sys.exit(f"{name} failed ({r.returncode})")
    print(f"   {name}: {dt:.0f} s", flush=True); log_time(name, dt)
    return r

def complete(store): return (store/'manifest.json').exists() and json.loads((store/'manifest.json').read_text()).get('complete')

orig_jsonl, regen_jsonl = W/'orig.jsonl', W/'regen.jsonl'
data = {'orig': W/'data-orig', 'regen': W/'data-regen'}
store = {'orig': W/'store-orig', 'vllm': W/'store-vllm', 'delta': W/'store-delta', 'regen': W/'store-regen', 'ref': W/'store-ref-all'}
ckpt = {d: W/f'drafter-{d}' for d in ('orig', 'vllm', 'delta', 'regen')}
SPECFORGE_IDS, MEANT_IDS = [1, 14, 26], [2, 15, 27]

if 'convs' in stages and not orig_jsonl.exists():
    from eagle_nb.data import load_conversations
    from eagle_nb.target import load_target
    tok = load_target('smollm2-135m').tokenizer
    convs, _ = load_conversations('sharegpt', limit=20 * a.conversations)
    out, seen = [], 0
    for c in convs:
        m = c.messages
        if len(m) < 2 or m[0]['role'] != 'user' or m[1]['role'] != 'assistant' or not m[1]['content'].strip(): continue
        n = len(tok.apply_chat_template(m[:1], add_generation_prompt=True, tokenize=True, return_dict=False))
        if not 8 <= n <= a.max_prompt_tokens: continue
        out.append({'id': c.id, 'messages': m[:2]})
        if len(out) == a.conversations: break
    if len(out) < a.conversations: sys.exit(f"only {len(out)} usable first exchanges")
    tmp = orig_jsonl.with_suffix('.tmp'); tmp.write_text(''.join(json.dumps(r) + '\n' for r in out)); tmp.rename(orig_jsonl)
    print(f"== convs: {len(out)} first exchanges (user turn <= {a.max_prompt_tokens} tokens) -> {orig_jsonl}")

def prepare(name, src):
    if not (data[name]/'manifest.json').exists():
        run(f'prepare-{name}', ['prepare', '--data', src, '--target', 'smollm2-135m', '--max-len', a.max_len, '--policy', 'truncate',
                                '--draft-vocab', a.draft_vocab, '--holdout', a.holdout, '--seed', 0, '--out', data[name]])

def extract(name, dname, extra=()):
    if not complete(store[name]):
        run(f'extract-{name}', ['extract', '--data', data[dname], '--target', 'smollm2-135m', '--out', store[name], *extra])

if 'orig' in stages:
    prepare('orig', orig_jsonl)
    extract('orig', 'orig')

def write_vllm_files(files: Path, capture: str):
    """What vLLM's extract_hidden_states connector writes per request: token_ids + hidden_states [T, 4, H], ids as HF
    hidden_states indices, id L = 30 the residual stream before the final norm (UPSTREAM.md, vLLM section); captured
    with `eagle_nb.diagnostics.capture_states` on the in-process target.
      capture='offset': its config names the SpecForge ids [1, 14, 26] -> the residual stream entering HF layers 1, 14, 26;
      capture='delta':  the right ids [2, 15, 27], but the connector keeps vLLM's `hidden_states` without adding `residual`:
                        the MLP output of layers 1, 14, 26 alone (the seed's "residual vs. delta capture")."""
    import torch
    from eagle_nb.data import TokenizedDataset
    from eagle_nb.diagnostics import capture_states
    from eagle_nb.formats import write_vllm_file
    from eagle_nb.target import load_target
    t0 = time.time()
    tgt = load_target('smollm2-135m')
    ds = TokenizedDataset.open(data['orig'])
    ext = capture_states(tgt, {smp['id']: smp['input_ids'] for smp in ds}, SPECFORGE_IDS if capture == 'offset' else MEANT_IDS,
                         final='pre', delta=None if capture == 'offset' else 'mlp', name=f'vllm-{capture}')
    files.mkdir(exist_ok=True)
    for i, sid in enumerate(ext.ids):
        x = ext.samples[sid]
        hs = torch.stack([x['layers'][k] for k in ext.layer_ids] + [x['final']], 1).to(tgt.dtype)   # the engine's dtype
        write_vllm_file(files/f'req-{i:05d}.safetensors', torch.as_tensor(x['input_ids']).int(), hs)
    (files/'DONE').write_text('ok')
    log_time(f'{files.name}-capture', time.time() - t0); print(f"== {files.name}: {len(ds)} in {time.time() - t0:.0f} s")

def vllm_store(name: str, capture: str):
    "A store imported from emulated vLLM files with the ids the user meant (2, 15, 27, 30), and its diagnosis."
    prepare('orig', orig_jsonl)
    files = W/f'{name}-files'
    if not complete(store[name]):
        if not (files/'DONE').exists(): write_vllm_files(files, capture)
        run(f'import-{name}', ['import', '--from', 'vllm', files, '--out', store[name], '--target', 'smollm2-135m',
                               '--layers', ','.join(map(str, MEANT_IDS + [30])), '--dataset', data['orig']])
    if not complete(store['ref']):   # layers 0..L-1 (+ the final state) for a few samples: the reference the diagnosis reads
        run('extract-ref', ['extract', '--data', data['orig'], '--target', 'smollm2-135m', '--out', store['ref'],
                            '--layers', ','.join(map(str, range(30))), '--limit', 8])
    diag = W/('diagnose.json' if name == 'vllm' else f'diagnose-{name}.json')
    if not diag.exists():
        r = run(f'diagnose-{name}', ['diagnose', store['ref'], store[name], '--json', '--limit', 8, '--expect-layers', '2,15,27',
                                     '--plots', W/f'diagnose-plots-{name}'])
        diag.write_text(r.stdout)

if 'vllm' in stages: vllm_store('vllm', 'offset')
if 'delta' in stages: vllm_store('delta', 'delta')

if 'regen' in stages:
    if not regen_jsonl.exists():
        run('regenerate', ['regenerate', '--data', orig_jsonl, '--target', 'smollm2-135m', '--mode', 'last', '--temperature', 0,
                           '--max-new-tokens', a.max_new_tokens, '--batch-size', 16, '--json', '--out', regen_jsonl])
    prepare('regen', regen_jsonl)
    extract('regen', 'regen')

train_flags = ['--steps', a.steps, '--batch-tokens', a.batch_tokens, '--lr', a.lr, '--max-len', a.max_len, '--init-lm-head', 'target',
               '--eval-fraction', 0.1, '--seed', 0, '--log-every', 1]
if 'train' in stages:
    for d in drafters:
        if not (ckpt[d]/'eval.json').exists():
            run(f'train-{d}', ['train', '--store', store[d], '--out', ckpt[d], '--data', data['regen' if d == 'regen' else 'orig'], *train_flags])

def eval_run(d, tag, extra=(), drafter=None):
    out = W/f'eval-{d}-{tag}.json'
    if not out.exists():
        run(f'eval-{d}-{tag}', ['eval', '--target', 'smollm2-135m', '--drafter', drafter or ckpt[d], '--prompts', 'sharegpt-heldout,humaneval',
                                '--dataset', data['orig'], '--limit', a.eval_limit, '--max-new-tokens', a.eval_new_tokens,
                                '--out', out, *extra])
if 'eval' in stages:
    for d in drafters:
        eval_run(d, 'chain3', ['--num-steps', 3])
        if d == 'orig': eval_run(d, 'tree', ['--num-steps', 3, '--topk', 4, '--num-draft-tokens', 8])
        if d == 'vllm':   # the diagnosis's fix without re-extracting: label the drafter with the taps it really learned
            fixed = W/'drafter-vllm-relabelled'
            if not (fixed/'config.json').exists():
                fixed.mkdir(exist_ok=True)
                for f in ckpt[d].iterdir():
                    if f.is_file() and f.name != 'config.json' and not (fixed/f.name).exists(): (fixed/f.name).symlink_to(f.resolve())
                cfg = json.loads((ckpt[d]/'config.json').read_text())
                cfg['config']['aux_layer_ids'] = cfg['provenance']['aux_layer_ids'] = SPECFORGE_IDS
                (fixed/'config.json').write_text(json.dumps(cfg, indent=1))
            eval_run(d, 'relabelled', ['--num-steps', 3], drafter=fixed)

if 'report' in stages:
    res = dict(settings=vars(a), times=json.loads(times_path.read_text()) if times_path.exists() else {}, drafters={})
    h = {n: json.loads((data[n]/'manifest.json').read_text())['heldout']['ids'] for n in data if (data[n]/'manifest.json').exists()}
    res['heldout_ids_equal'] = len(set(map(tuple, h.values()))) == 1 if h else None
    for n in data:
        if (data[n]/'manifest.json').exists():
            m = json.loads((data[n]/'manifest.json').read_text())
            res.setdefault('datasets', {})[n] = dict(samples=len(m['samples']), tokens=m['num_tokens'],
                                                     loss_tokens=sum(s['loss_tokens'] for s in m['samples']))
    if regen_jsonl.exists():
        mf = regen_jsonl.with_suffix('.manifest.json')
        res['regenerate'] = json.loads(mf.read_text()).get('report') if mf.exists() else None
    for d in drafters:
        if not (ckpt[d]/'eval.json').exists(): continue
        ev = json.loads((ckpt[d]/'eval.json').read_text())
        mets = [json.loads(l) for l in (ckpt[d]/'metrics.jsonl').read_text().splitlines() if l.strip()]
        tr = [m for m in mets if m.get('kind') == 'train']
        r = dict(train_eval=ev, steps=len(tr), tokens=sum(m['tokens'] for m in tr),
                 train_seconds=round(sum(m['seconds'] for m in tr), 1), evals={})
        for f in sorted(W.glob(f'eval-{d}-*.json')):
            e = json.loads(f.read_text())
            r['evals'][f.stem.split('-', 2)[2]] = e
        res['drafters'][d] = r
    for key, f in [('diagnose', W/'diagnose.json'), ('diagnose_delta', W/'diagnose-delta.json')]:
        if f.exists():
            try: res[key] = json.loads(f.read_text())
            except json.JSONDecodeError: res[key] = f.read_text()[-4000:]
    (W/'results.json').write_text(json.dumps(res, indent=1, default=str))
    dest = ROOT/'bench'/'results'; dest.mkdir(exist_ok=True)
    shutil.copy(W/'results.json', dest/f'exp_drafters-s{a.steps}.json')
    print(f"== report: {W/'results.json'} -> {dest/f'exp_drafters-s{a.steps}.json'}")
