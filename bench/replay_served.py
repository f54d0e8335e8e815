#!/usr/bin/env python
"""τ of a greedy chain decoder on the eval's own prompts, replayed from one teacher-forced forward (`train.replay_chain`).

Build once: the target's greedy continuation of each prompt (`specdec.generate_plain`, the eval's plain decoding), written
as {id, input_ids, loss_mask} and extracted into a store like any other (`eagle-nb extract`). Then each drafter is one TTT
forward per sequence: its top-1 hit per (draft depth, row) decides the rounds a K-step chain would verify. With
`--compare EVAL.json` (an `eagle-nb eval` of one of the drafters on the same prompts, limit and new tokens) the replayed
τ is set beside the decoded τ prompt by prompt.

    python bench/replay_served.py --dataset RUN/data --prompts humaneval,sharegpt-heldout,configs/prompts/stdlib.jsonl \
        --limit 16 --max-new-tokens 96 --work _runs/replay --drafter ttt3=RUN/drafter --compare ttt3=RUN/eval/eval.json \
        --json bench/results/replay-standard.json
"""
import argparse, json, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(a, work: Path) -> tuple[Path, dict]:
    "The continuations (work/served.jsonl) and their store (work/store); both reused when there."
    from eagle_nb.eval import load_eval_prompts
    from eagle_nb.specdec import generate_plain, stop_token_ids, TargetDecoder
    from eagle_nb.target import load_target
    data, store = work/'served.jsonl', work/'store'
    meta_path = work/'served.meta.json'
    want = dict(target=a.target, prompts=a.prompts, dataset=str(a.dataset), limit=a.limit, max_new_tokens=a.max_new_tokens, num_steps=a.num_steps)
    if meta_path.exists() and json.loads(meta_path.read_text()).get('config') != want:
        sys.exit(f"{work}: built for another configuration ({meta_path}); use another --work")
    if not data.exists():
        work.mkdir(parents=True, exist_ok=True)
        tgt = load_target(a.target)
        stops = stop_token_ids(tgt)
        prompts = load_eval_prompts(a.prompts, tgt.tokenizer, a.limit, a.dataset)
        dec, rows, t0 = TargetDecoder(tgt), [], time.time()
        for i, p in enumerate(prompts):
            # num_steps further than the decoder's max_new_tokens: its last round may accept drafts past the limit
            out = generate_plain(tgt, p.input_ids, a.max_new_tokens + a.num_steps, decoder=dec)
            rows.append(dict(id=f"p{i:04d}", prompt_id=p.id, input_ids=list(p.input_ids) + out, loss_mask=[0] * len(p.input_ids) + [1] * len(out),
                             prompt_tokens=len(p.input_ids), set=p.set,
                             stopped=bool(out) and out[-1] in stops))   # ended at EOS, not at the cut
            print(f"\rgenerated {i + 1}/{len(prompts)}", end='', flush=True)
        print(f" in {time.time() - t0:.0f} s")
        tmp = data.with_suffix('.tmp')
        tmp.write_text(''.join(json.dumps(r) + '\n' for r in rows)); tmp.replace(data)
        meta_path.write_text(json.dumps(dict(config=want, prompts=len(rows), tokens=sum(len(r['input_ids']) for r in rows),
                                             new_tokens=sum(sum(r['loss_mask']) for r in rows)), indent=1))
    if not (store/'manifest.json').exists() or not json.loads((store/'manifest.json').read_text()).get('complete'):
        subprocess.run([str(Path(sys.executable).parent/'eagle-nb'), 'extract', '--target', a.target, '--data', str(data), '--out', str(store)],
                       check=True)
    rows = {r['id']: r for r in map(json.loads, data.read_text().splitlines())}
    if any('stopped' not in r for r in rows.values()):   # built before the rows said so
        stops = stop_token_ids(load_target(a.target))
        for r in rows.values():
            out = r['input_ids'][r['prompt_tokens']:]
            r['stopped'] = bool(out) and out[-1] in stops
    seen = {}
    for r in rows.values():                               # the prompt's place in its set (the eval's --limit takes the first)
        r['rank'] = seen[r['set']] = seen.get(r['set'], -1) + 1
    return store, rows


def replay(store_dir: Path, rows: dict, drafter_dir: str, steps: int, new_tokens: int) -> dict:
    "Per prompt: accepted drafts per round of a `steps`-step chain, and how often the store's teacher agrees with the data."
    import torch
    from eagle_nb.core import fast_dtype, pick_device
    from eagle_nb.drafter import load_drafter
    from eagle_nb.store import HiddenStateStore
    from eagle_nb.train import TargetHead, load_target_heads, replay_sample
    dev = pick_device(None); dt = fast_dtype(dev)                       # CUDA when present
    store = HiddenStateStore.open(store_dir)
    _, embed, head_w = load_target_heads(store.manifest['target']['name'])
    d = load_drafter(drafter_dir, embed_weight=embed, device=dev, dtype=torch.float32).eval()
    head = TargetHead(head_w, d.draft_token_ids.cpu(), device=dev, dtype=dt)
    out = {}
    for sid in store.sample_ids:
        r, st = rows[sid], {}                  # st: how often the store's teacher is the continuation's own token (1 but for ties)
        acc = replay_sample(d, head, store.get(sid, dtype=dt), r['prompt_tokens'], steps, new_tokens, dev, stats=st, stopped=r['stopped'])
        out[sid] = dict(set=r['set'], prompt_id=r['prompt_id'], rank=r['rank'], rounds=len(acc), tau=1 + sum(acc) / max(1, len(acc)),
                        accepted_hist=[acc.count(k) for k in range(steps + 1)], teacher_is_data=st['teacher_is_data'])   # rounds accepting 0..steps drafts
    return out


def summary(per: dict, steps: int) -> dict:
    "τ over all rounds and α_k (`eval.alpha_from_histogram`: accepted past depth k-1 / reached depth k-1)."
    from eagle_nb.eval import alpha_from_histogram
    hist = [sum(p['accepted_hist'][k] for p in per.values()) for k in range(steps + 1)]
    rounds, acc = sum(hist), sum(k * n for k, n in enumerate(hist))
    return dict(tau=1 + acc / max(1, rounds), rounds=rounds, alpha=[a or 0.0 for a in alpha_from_histogram(hist)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--target', default='smollm2-135m')
    ap.add_argument('--prompts', default='humaneval,sharegpt-heldout,configs/prompts/stdlib.jsonl')
    ap.add_argument('--dataset', default='', help="prepared dataset (for 'sharegpt-heldout')")
    ap.add_argument('--limit', type=int, default=16, help='prompts per set')
    ap.add_argument('--max-new-tokens', type=int, default=96)
    ap.add_argument('--num-steps', type=int, default=3, help='chain depth replayed')
    ap.add_argument('--work', default=str(ROOT/'_runs'/'replay'), help='continuations and their store (reused)')
    ap.add_argument('--drafter', action='append', required=True, help='NAME=DIR, repeated')
    ap.add_argument('--compare', action='append', default=[], help='NAME=EVAL.json: that drafter decoded by `eagle-nb eval` on the same prompts')
    ap.add_argument('--first', type=int, default=0, help='also summarize the first N prompts of each set (an eval or bench run with --limit N)')
    ap.add_argument('--json', default='')
    a = ap.parse_args()
    import torch
    from eagle_nb.core import machine_info
    store, rows = build(a, Path(a.work))
    res = dict(command='python bench/replay_served.py ' + ' '.join(sys.argv[1:]), machine=machine_info(), threads=torch.get_num_threads(),
               prompts=a.prompts, limit=a.limit, max_new_tokens=a.max_new_tokens, num_steps=a.num_steps, store=str(store), drafters={})
    decoded = dict(s.split('=', 1) for s in a.compare)
    for spec in a.drafter:
        name, path = spec.split('=', 1)
        t0 = time.time()
        per = replay(store, rows, path, a.num_steps, a.max_new_tokens)
        s = summary(per, a.num_steps)
        by_set = {st: summary({k: p for k, p in per.items() if p['set'] == st}, a.num_steps) for st in dict.fromkeys(p['set'] for p in per.values())}
        if a.first: by_set[f'first {a.first} a set'] = summary({k: p for k, p in per.items() if p['rank'] < a.first}, a.num_steps)
        entry = dict(path=path, seconds=round(time.time() - t0, 1), **s, by_set=by_set,
                     teacher_is_data=sum(p['teacher_is_data'] for p in per.values()) / len(per), prompts=per)
        line = (f"{name}: replayed tau {s['tau']:.3f}, alpha {' / '.join(f'{x:.3f}' for x in s['alpha'])} over {s['rounds']} rounds "
                f"({len(per)} prompts, {entry['seconds']:.0f} s; the store's teacher is the data's token at {entry['teacher_is_data']:.4f} of rows)")
        if name in decoded:
            ev = json.loads(Path(decoded[name]).read_text())
            dec = {(p['set'], str(p['id'])): p for p in ev['prompts']}
            key = lambda k: (rows[k]['set'], str(rows[k]['prompt_id']))
            pairs = [(per[k]['tau'], dec[key(k)]['tau']) for k in per if key(k) in dec]
            for k in per:
                if key(k) in dec: per[k]['decoded_tau'] = dec[key(k)]['tau']
            m = ev['metrics']['all']
            diffs = [x - y for x, y in pairs]
            entry['decoded'] = dict(eval=decoded[name], tau=m['accept_length'], alpha=m['alpha'], prompts=len(pairs),
                                    mean_abs_prompt_diff=sum(map(abs, diffs)) / max(1, len(diffs)),
                                    prompts_within_0_05=sum(abs(x) <= 0.05 for x in diffs))
            line += (f"\n   decoded by eagle-nb eval: tau {m['accept_length']:.3f}, alpha {' / '.join(f'{x:.3f}' for x in m['alpha'])}; "
                     f"per prompt |replayed - decoded| mean {entry['decoded']['mean_abs_prompt_diff']:.3f}, "
                     f"{entry['decoded']['prompts_within_0_05']} of {len(pairs)} within 0.05")
        if a.first:
            f = by_set[f'first {a.first} a set']
            line += f"\n   the first {a.first} prompts of each set: replayed tau {f['tau']:.3f}, alpha {' / '.join(f'{x:.3f}' for x in f['alpha'])}"
        res['drafters'][name] = entry
        print(line, flush=True)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == '__main__':
    main()
