#!/usr/bin/env python
"""Original answers against the target's own: two drafters at equal steps, replayed on the served prompts.

The same ShareGPT first exchanges (user turn of at most --max-prompt-tokens) twice: with ShareGPT's answers ("orig"),
and with the target's greedy answers regenerated through a real vLLM server on 127.0.0.1 ("regen"; `eagle-nb regenerate
--backend openai`, the server started from the engine venv and stopped by its PID). Each is prepared, extracted and
trained with the same recipe for --steps steps, then both (and any --baseline drafter) are replayed on the served prompts
by bench/replay_served.py. Conversations held out by --heldout-from (a prepared dataset), and their relatives (the same
first user turn, other parts of the same ShareGPT chat), are never used. Every stage reuses what WORK already holds.

    python bench/regen_screen.py --heldout-from RUN/data --work _runs/regen --conversations 1500 --steps 1000 \\
        --baseline s-t1=_runs/temp/t1 --replay-work _runs/replay --json bench/results/regen_screen-1000.json

With --clean, two more arms on the conversations whose regenerated answer is not degenerate (the target looped, or hit
--max-new-tokens): "regen-clean", and "orig-clean" with ShareGPT's answers to exactly those prompts, so that the pair
compares the two kinds of answer without the loops.

With --cut-loops, one more arm, "regen-cut": every conversation, each degenerate regenerated answer cut where its loop
starts (`eagle_nb.regenerate.cut_loop`; one copy of the repeated text kept), the others as they were: the target's answers as a generation
that stopped as soon as it looped would have left them. The teacher is the target's own distribution at every position,
so a cut answer trains on what the target predicts there. The JSON's "cut_loops" gives the regenerated tokens kept.
"""
import argparse, json, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

def first_exchanges(a, path: Path):
    "WORK/orig.jsonl: the first --conversations usable first exchanges, none held out by --heldout-from or related to one."
    from eagle_nb.data import load_conversations, TokenizedDataset, _holdout_relatives
    from eagle_nb.target import load_target
    held = TokenizedDataset.open(a.heldout_from, verify=False).heldout() if a.heldout_from else []
    convs, held_ids = load_conversations('sharegpt', limit=a.scan)[0], {c.id for c in held}
    skip = held_ids | _holdout_relatives(held + [c for c in convs if c.id not in held_ids], held_ids, by_part=True)   # prepare's rule
    tok = load_target(a.target, need=('config', 'tokenizer', 'template')).tokenizer
    out, left_out = [], 0
    for c in convs:
        m = c.messages
        if c.id in skip: left_out += 1; continue
        if len(m) < 2 or m[0]['role'] != 'user' or m[1]['role'] != 'assistant' or not m[1]['content'].strip(): continue
        n = len(tok.apply_chat_template(m[:1], add_generation_prompt=True, tokenize=True, return_dict=False))
        if 8 <= n <= a.max_prompt_tokens: out.append({'id': c.id, 'messages': m[:2]})
        if len(out) == a.conversations: break
    if len(out) < a.conversations: sys.exit(f"only {len(out)} usable first exchanges in the first {a.scan} ShareGPT records; raise --scan")
    tmp = path.with_suffix('.tmp'); tmp.write_text(''.join(json.dumps(r) + '\n' for r in out)); tmp.replace(path)
    print(f"{len(out)} first exchanges -> {path} ({left_out} held out or related to a held-out conversation, skipped)", flush=True)


def eagle(*args):
    cmd = [str(BIN/'eagle-nb'), *map(str, args)]
    print('$ eagle-nb ' + ' '.join(map(str, args)), flush=True)
    subprocess.run(cmd, check=True)


def regenerate(a, src: Path, out: Path):
    "WORK/regen.jsonl through a vLLM server of the target (resumable: regenerate keeps its own progress log)."
    from eagle_nb.engines import server_model_dir
    from eagle_nb.vllm import start_vllm_server
    srv = start_vllm_server(server_model_dir(a.target, 'vLLM'), run_dir=out.parent/'vllm', name='regen', max_model_len=2048)
    try: eagle('regenerate', '--data', src, '--backend', 'openai', '--url', f'http://127.0.0.1:{srv.port}', '--mode', 'last',
               '--temperature', 0, '--max-new-tokens', a.max_new_tokens, '--concurrency', a.concurrency, '--target', a.target, '--out', out)
    finally: srv.stop()


def records(path: Path) -> list[dict]:
    "The records of a JSONL file, by eagle_nb.data's reader (lines end at \\n only: answers may hold U+2028); a broken line stops the bench."
    from eagle_nb.data import DataError, _iter_jsonl
    out = []
    for where, r in _iter_jsonl(path):
        if isinstance(r, DataError): raise r
        out.append(r)
    return out


def clean_ids(regen: Path) -> list[str]:
    "Ids of the regenerated conversations none of whose answers is degenerate (`regenerate.degenerate_reason`: no loop, not cut at the cap)."
    return [r['id'] for r in records(regen) if not any(t.get('degenerate') for t in r['regenerated']['turns'])]


def write_subset(src: Path, ids: list[str], out: Path) -> int:
    "The records of `src` whose id is in `ids`, in `src`'s order, written to `out`; how many."
    want = set(ids)
    rows = [r for r in records(src) if r['id'] in want]
    tmp = out.with_suffix('.tmp'); tmp.write_text(''.join(json.dumps(r, ensure_ascii=False) + '\n' for r in rows), encoding='utf-8'); tmp.replace(out)
    return len(rows)


def cut_loops(regen: Path, out: Path, tokenizer) -> dict:
    "WORK/regen-cut.jsonl: `regen`'s records with each looping answer cut by `cut_loop` (as `eagle-nb regenerate --cut-loops` cuts while it generates); the answers cut and tokens kept."
    from eagle_nb.regenerate import cut_loop
    rows, cut, before, after = [], 0, 0, 0
    for r in records(regen):
        for t in r['regenerated']['turns']:
            m = r['messages'][t['message_index']]
            before += t['completion_tokens']
            m['content'], at = cut_loop(m['content'], t.get('degenerate'))
            if at is not None:
                cut += 1
                t['cut_at_loop'] = at                                      # a character offset, as eagle-nb regenerate --cut-loops records it
                t['kept_tokens'] = len(tokenizer(m['content'], add_special_tokens=False)['input_ids'])
                after += t['kept_tokens']
            else: after += t['completion_tokens']
        rows.append(r)
    tmp = out.with_suffix('.tmp'); tmp.write_text(''.join(json.dumps(r, ensure_ascii=False) + '\n' for r in rows), encoding='utf-8'); tmp.replace(out)
    return dict(answers_cut=cut, completion_tokens=before, kept_tokens=after)


def complete(d: Path) -> bool:
    m = d/'manifest.json'
    return m.exists() and bool(json.loads(m.read_text()).get('complete'))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--target', default='smollm2-135m')
    ap.add_argument('--heldout-from', default='', help='prepared dataset whose held-out conversations (and their relatives) are skipped')
    ap.add_argument('--work', default=str(ROOT/'_runs'/'regen'))
    ap.add_argument('--conversations', type=int, default=1500)
    ap.add_argument('--scan', type=int, default=4000, help='ShareGPT records read to find them')
    ap.add_argument('--max-prompt-tokens', type=int, default=320)
    ap.add_argument('--max-new-tokens', type=int, default=448, help='regenerated answer cap')
    ap.add_argument('--concurrency', type=int, default=64, help='requests in flight to the vLLM server')
    ap.add_argument('--steps', type=int, default=1000)
    ap.add_argument('--train-args', default='--ttt-steps 3 --lr 0.001 --init-lm-head target --warmup 0.015 --batch-tokens 512 '
                                            '--max-len 512 --eval-fraction 0.03', help='the recipe, the same for both')
    ap.add_argument('--baseline', action='append', default=[], help='NAME=DIR: another drafter replayed beside them')
    ap.add_argument('--replay-work', default=str(ROOT/'_runs'/'replay'), help="bench/replay_served.py's --work (its continuations, reused)")
    ap.add_argument('--replay-dataset', default='', help="its --dataset (default: --heldout-from)")
    ap.add_argument('--clean', action='store_true', help="two more arms on the conversations whose regenerated answer is not "
                    "degenerate (no loop, not cut at --max-new-tokens): 'regen-clean', and 'orig-clean' with ShareGPT's answers to the same prompts")
    ap.add_argument('--cut-loops', action='store_true', help="one more arm, 'regen-cut': every degenerate regenerated answer cut where its loop starts")
    ap.add_argument('--json', default='')
    a = ap.parse_args()
    W = Path(a.work); W.mkdir(parents=True, exist_ok=True)
    src = {'orig': W/'orig.jsonl', 'regen': W/'regen.jsonl'}
    if not src['orig'].exists(): first_exchanges(a, src['orig'])
    if not src['regen'].exists(): regenerate(a, src['orig'], src['regen'])
    clean = {}
    if a.clean:   # the same prompts both ways, without the answers the target looped on: the loops measured apart
        keep = clean_ids(src['regen'])
        for n, base in (('orig-clean', src['orig']), ('regen-clean', src['regen'])):
            src[n] = W/f'{n}.jsonl'
            if not src[n].exists(): write_subset(base, keep, src[n])
        clean = dict(conversations=len(keep), of=len(records(src['regen'])))
        print(f"clean arms: {clean['conversations']} of {clean['of']} conversations have no degenerate regenerated answer", flush=True)
    cut = {}
    if a.cut_loops:
        src['regen-cut'] = W/'regen-cut.jsonl'
        stats = W/'regen-cut.stats.json'
        if not (src['regen-cut'].exists() and stats.exists()):
            from eagle_nb.target import load_target
            stats.write_text(json.dumps(cut_loops(src['regen'], src['regen-cut'], load_target(a.target, need=('config', 'tokenizer')).tokenizer)))
        cut = json.loads(stats.read_text())
        print(f"regen-cut: {cut['answers_cut']} answers cut where they loop; {cut['kept_tokens']:,} of {cut['completion_tokens']:,} regenerated tokens kept", flush=True)
    facts = {}
    for n, path in src.items():
        data, store, out = W/f'data-{n}', W/f'store-{n}', W/f's-{n}'
        if not (data/'manifest.json').exists():
            eagle('prepare', '--data', path, '--target', a.target, '--max-len', 512, '--policy', 'split', '--draft-vocab-size', 8192, '--holdout', 0, '--out', data)
        if not complete(store): eagle('extract', '--target', a.target, '--data', data, '--out', store)
        if not (out/'model.safetensors').exists():
            eagle('train', '--store', store, '--data', data, '--out', out, '--steps', a.steps, '--save-every', a.steps, *a.train_args.split())
        m = json.loads((data/'manifest.json').read_text())
        rows = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines()]
        ev = [r for r in rows if r['kind'] == 'eval'][-1]
        tr = [r for r in rows if r['kind'] == 'train']
        facts[n] = dict(samples=m['num_samples'], tokens=m['num_tokens'], loss_tokens=m['num_loss_tokens'], draft_vocab_coverage=m['draft_vocab']['coverage'],
                        steps=len(tr), tokens_trained=sum(r['tokens'] for r in tr), train_s=round(sum(r['seconds'] for r in tr), 1),
                        heldout_windows_acc=ev['acc'], heldout_windows_rows=ev['rows'][0])
    regen_manifest = W/'regen.manifest.json'
    rep = json.loads(regen_manifest.read_text())['report'] if regen_manifest.exists() else {}
    replay_json = W/'replay.json'
    drafters = [*a.baseline, *(f"fe-{n}={W/f's-{n}'}" for n in src)]
    subprocess.run([sys.executable, str(ROOT/'bench'/'replay_served.py'), '--dataset', a.replay_dataset or a.heldout_from, '--target', a.target,
                    '--limit', '16', '--max-new-tokens', '96', '--first', '8', '--work', a.replay_work, '--json', str(replay_json),
                    *[x for d in drafters for x in ('--drafter', d)]], check=True)
    res = dict(command='python bench/regen_screen.py ' + ' '.join(sys.argv[1:]), settings=vars(a), data=facts, clean=clean, cut_loops=cut,
               regenerate={k: rep.get(k) for k in ('conversations', 'completion_tokens', 'seconds', 'tokens_per_s', 'degenerate')},
               replay=json.loads(replay_json.read_text()))
    for n, f in facts.items():
        print(f"{n}: {f['samples']} samples, {f['loss_tokens']} loss tokens, draft vocab coverage {f['draft_vocab_coverage']:.4f}; "
              f"{f['steps']} steps, {f['tokens_trained']} tokens in {f['train_s']} s; held-out top-1 "
              + ' / '.join(f'{x:.3f}' for x in f['heldout_windows_acc']))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == '__main__':
    main()
