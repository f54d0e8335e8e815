#!/usr/bin/env python
"""Screen training changes on one run's store at a fixed number of steps, graded on held-out windows and replayed on the
eval's own prompts, side by side in one run.

Each variant is `eagle-nb train` on RUN/store with the standard profile's train-stage recipe (configs/standard.yaml, or
--profile: TTT 3, lr 1e-3, the target's lm_head, one 512-token window a step today) for --steps steps of its cosine, plus
the variant's own flags (later flags win), into WORK/NAME. A
variant already trained with the same settings is reused: every field of its train_config.json but `out` and `resume`
equals the command's TrainConfig. Then per variant: held-out top-1 per TTT position and along the chain (the trainer's eval.json),
the median training tokens/s, the share of the served tokens its draft vocabulary holds, and bench/replay_served.py's
τ on the served prompts (by default the eval's 48 prompts x 96 tokens, a 3-step chain) beside RUN/drafter where there is
one.

    python bench/recipe_screen.py --run RUN --work _runs/screen --steps 1000 --replay-work _runs/replay \\
        --variant base= --variant last='--init-layer target:last' --variant v16k='--data DATA16K' --json OUT.json

RUN/data, where there is one, gives the draft vocabulary and the held-out prompts; a variant's --data replaces it
(another draft vocabulary: `eagle-nb prepare` with RUN's settings and another --draft-vocab-size makes the same samples).
"""
import argparse, json, shlex, statistics, subprocess, sys, time
from dataclasses import asdict
from pathlib import Path

from eagle_nb.train import config_from_args

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


RECIPE_KEYS = ('ttt_steps', 'lr', 'init_lm_head', 'warmup', 'batch_tokens', 'max_len', 'eval_fraction')   # the profile's train stage


def recipe(run: Path, out: Path, steps: int, flags: list[str], profile: str = 'standard', epochs: int = 0) -> list[str]:
    "`eagle-nb train` on RUN/store with the profile's train-stage recipe for `steps` steps (or `epochs` passes), then the variant's flags."
    from eagle_nb.pipeline import load_profile
    train = next(s for s in load_profile(profile, ROOT)['stages'] if s['notebook'] == '03_train.ipynb')['parameters']
    length = ['--steps', '0', '--epochs', str(epochs), '--save-every', '500'] if epochs else ['--steps', str(steps), '--save-every', str(steps)]
    base = ['--store', str(run/'store'), '--out', str(out), *length]
    for k in RECIPE_KEYS: base += [f"--{k.replace('_', '-')}", str(train[k])]
    if '--data' not in flags and (run/'data').exists(): base += ['--data', str(run/'data')]
    return [str(BIN/'eagle-nb'), 'train', *base, *flags]


def block_means(xs: list[float], k: int) -> list[float|None]:
    "The means of `xs` in `k` consecutive blocks of (nearly) equal length; None for an empty block."
    return [statistics.mean(b) if b else None for b in (xs[i * len(xs) // k:(i + 1) * len(xs) // k] for i in range(k))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--run', required=True, help='a standard-profile run directory (its store, data, drafter, eval)')
    ap.add_argument('--work', required=True, help='each variant trains into WORK/NAME')
    ap.add_argument('--steps', type=int, default=1000)
    ap.add_argument('--epochs', type=int, default=0, help='train this many passes over the store instead of --steps (the schedule of a full run)')
    ap.add_argument('--variant', action='append', required=True, help="NAME=FLAGS (eagle-nb train flags; empty: the recipe as it is), repeated")
    ap.add_argument('--replay-work', default=str(ROOT/'_runs'/'replay'), help="bench/replay_served.py's --work (its continuations and store, reused)")
    ap.add_argument('--prompts', default='humaneval,sharegpt-heldout,configs/prompts/stdlib.jsonl', help='the replay\'s prompt sets (the eval\'s)')
    ap.add_argument('--limit', type=int, default=16, help='prompts a set')
    ap.add_argument('--max-new-tokens', type=int, default=96)
    ap.add_argument('--profile', default='standard', help="whose train stage gives the recipe (configs/NAME.yaml: " + ', '.join(RECIPE_KEYS) + ')')
    ap.add_argument('--json', default='')
    a = ap.parse_args()
    run, work = Path(a.run), Path(a.work)
    variants = {}
    for spec in a.variant:
        name, _, flags = spec.partition('=')
        variants[name] = shlex.split(flags)
    res = dict(command='python bench/recipe_screen.py ' + ' '.join(shlex.quote(x) for x in sys.argv[1:]), run=str(run),
               steps=None if a.epochs else a.steps, epochs=a.epochs or None, variants={})
    acc1, step_tokens = {}, {}   # each variant's training top-1 at position 1 and tokens, step by step
    for name, flags in variants.items():
        out = work/name
        cmd = recipe(run, out, a.steps, flags, a.profile, a.epochs)
        want = {k: v for k, v in asdict(config_from_args(cmd[2:])).items() if k not in ('out', 'resume')}   # trained with --no-resume
        had = json.loads((out/'train_config.json').read_text()) if (out/'train_config.json').exists() else {}
        if not ((out/'eval.json').exists() and all(had.get(k) == v for k, v in want.items())):
            print(f"{name}: {' '.join(cmd)}", flush=True)
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.time()
            with open(work/f'{name}.log', 'w') as log:
                subprocess.run(cmd + ['--no-resume'], check=True, stdout=log, stderr=subprocess.STDOUT)
            print(f"{name}: trained in {time.time() - t0:.0f} s", flush=True)
        else: print(f"{name}: reusing {out} (trained with these settings)", flush=True)
        ev = json.loads((out/'eval.json').read_text())
        recs = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines() if l.strip()]
        trs = [r for r in recs if r.get('kind') == 'train']
        tps = [r['tokens_per_s'] for r in trs if r.get('tokens_per_s')]
        acc1[name] = [r['acc'][0] for r in trs]
        res['variants'][name] = dict(flags=' '.join(flags), acc=ev['acc'], acc_chain=ev.get('acc_chain'), tau_sim=ev.get('tau_sim'),
                                     median_tokens_per_s=statistics.median(tps) if tps else None, steps=len(trs),
                                     step_seconds=sum(r.get('seconds', 0) for r in trs),   # the steps' own time (no compile, no evaluation)
                                     train_acc1_by_fifth=block_means(acc1[name], 5),
                                     train_acc1_by_fortieth=[None if m is None else round(m, 4) for m in block_means(acc1[name], 40)], out=str(out))
        step_tokens[name] = [r['tokens'] for r in trs]
    # Paired on the training rows: where two variants see the same windows in the same order (the data order is seeded apart
    # from the drafter's init; the same tokens at every step is the check), step-by-step differences against the first variant
    # over the last fifth of the steps are a lower-noise reading than the held-out windows (its standard error treats the
    # steps as independent). Variants that change the order (--seed, --batch-tokens, another length) are not paired.
    first = next(iter(variants))
    for name in list(variants)[1:]:
        n = len(acc1[first])
        if n < 10 or step_tokens[name] != step_tokens[first]:
            print(f"{name}: not paired with {first} (other windows or another order)", flush=True); continue
        d = [a - b for a, b in zip(acc1[name][n - n // 5:], acc1[first][n - n // 5:])]
        res['variants'][name]['paired_last_fifth'] = dict(against=first, steps=len(d), mean_acc1_diff=statistics.mean(d),
                                                          se=statistics.stdev(d) / len(d) ** 0.5, share_ahead=sum(x > 0 for x in d) / len(d))
    from safetensors import safe_open
    from eagle_nb.core import machine_info
    from eagle_nb.data import TokenizedDataset
    from eagle_nb.store import HiddenStateStore
    res['machine'] = machine_info()
    tmp = work/'replay.json'
    subprocess.run([sys.executable, str(ROOT/'bench'/'replay_served.py'), '--target', HiddenStateStore.open(run/'store').manifest['target']['name'],
                    '--prompts', a.prompts, *(['--dataset', str(run/'data')] if (run/'data').exists() else []), '--limit', str(a.limit),
                    '--max-new-tokens', str(a.max_new_tokens), '--first', str(max(1, a.limit // 2)), '--work', a.replay_work,
                    *(['--drafter', f"profile={run/'drafter'}"] if (run/'drafter').exists() else []),
                    *[x for n in variants for x in ('--drafter', f's-{n}={work/n}')], '--json', str(tmp)], check=True)
    served = [json.loads(l) for l in (Path(a.replay_work)/'served.jsonl').read_text().splitlines() if l.strip()]
    toks = [t for r in served for t in r['input_ids'][r['prompt_tokens']:r['prompt_tokens'] + a.max_new_tokens]]   # the replay's new tokens
    for name, flags in variants.items():   # how much of what the target says each draft vocabulary can draft at all
        with safe_open(str(work/name/'model.safetensors'), 'pt') as f: t2d = f.get_tensor('t2d').bool()
        data = Path(flags[flags.index('--data') + 1]) if '--data' in flags else run/'data'
        v = res['variants'][name]
        v['draft_vocab_size'] = int(t2d.sum())
        v['train_coverage'] = TokenizedDataset.open(data).manifest['draft_vocab']['coverage'] if data.exists() else None
        v['served_coverage'] = sum(bool(t2d[t]) for t in toks) / len(toks) if toks else None
    rp = json.loads(tmp.read_text())
    for k, d in rp['drafters'].items(): d.pop('prompts', None)        # per-prompt detail stays in WORK/replay.json
    res['replay'] = rp
    for n, v in res['variants'].items():
        r = rp['drafters'][f's-{n}']
        print(f"{n:>10}: held-out top-1 {' / '.join(f'{x:.3f}' for x in v['acc'])}, replayed tau {r['tau']:.3f}"
              f" (alpha {' / '.join(f'{x:.3f}' for x in r['alpha'])}), {v['median_tokens_per_s'] or 0:.0f} tokens/s; draft vocab {v['draft_vocab_size']:,}"
              + (f" covers {v['train_coverage']:.3f} of the training tokens," if v['train_coverage'] is not None else ' covers')
              + f" {v['served_coverage'] or 0:.3f} of the served ones", flush=True)
        if v.get('paired_last_fifth'):
            pr = v['paired_last_fifth']
            print(f"{'':>10}  training top-1 @1 over the last {pr['steps']} steps, paired against {pr['against']}: "
                  f"{pr['mean_acc1_diff']:+.4f} ± {pr['se']:.4f} (ahead on {pr['share_ahead']:.0%} of the steps)", flush=True)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1))
        print(f"wrote {a.json}")


if __name__ == '__main__':
    main()
