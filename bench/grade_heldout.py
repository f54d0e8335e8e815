#!/usr/bin/env python
"""Grade several drafters on one ruler: `eagle_nb.train.evaluate` (top-1 accuracy per TTT position, tau_sim) on the same
held-out windows of a store, whatever held-out split each was trained with; and the same along chains (`acc_chain`: top-1
at position k over the rows whose drafts 1..k-1 were the target's greedy tokens, as were the data's; the decoder's
alpha_k). Use the smallest `--eval-fraction` any of them trained with: the split is a seeded hash of the sample ids, so
a smaller fraction's windows are held out of every larger one's training too (`train.heldout_split`).

    python bench/grade_heldout.py --store RUN/store --eval-fraction 0.03 --drafter ttt7=RUN/drafter --drafter ttt3=OTHER \
        --json bench/results/heldout.json
"""
import argparse, json, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_recipe_vs_specforge import grade, split_of   # the same call `train` makes at its end, and its split


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--store', required=True)
    ap.add_argument('--drafter', action='append', required=True, help='NAME=DIR, repeated')
    ap.add_argument('--eval-fraction', type=float, default=0.03, help='held-out share of sample ids (seed 0), as train splits them')
    ap.add_argument('--max-len', type=int, default=512)
    ap.add_argument('--json', default='')
    a = ap.parse_args()
    import torch
    from eagle_nb.core import machine_info
    from eagle_nb.drafter import load_drafter
    from eagle_nb.train import load_target_heads
    from eagle_nb.store import HiddenStateStore
    _, held = split_of(a.store, a.max_len, a.eval_fraction)
    _, embed, _ = load_target_heads(HiddenStateStore.open(a.store).manifest['target']['name'])
    out = dict(store=a.store, eval_fraction=a.eval_fraction, heldout_windows=len(held), heldout_tokens=sum(held.values()),
               machine=machine_info(), command='python bench/grade_heldout.py ' + ' '.join(sys.argv[1:]), drafters={})
    for spec in a.drafter:
        name, path = spec.split('=', 1)
        t0 = time.time()
        d = load_drafter(path, embed_weight=embed, device='cpu', dtype=torch.float32)
        ev = grade(a.store, held, d, a.max_len)
        out['drafters'][name] = dict(path=path, acc=ev['acc'], tau_sim=ev['tau_sim'], rows=ev['rows'][0], acc_chain=ev['acc_chain'],
                                     tau_chain=ev['tau_chain'], chain_rows=ev['chain_rows'], seconds=round(time.time() - t0, 1))
        print(f"{name}: top-1 by TTT position {' / '.join(f'{x:.3f}' for x in ev['acc'])}; tau_sim {ev['tau_sim']:.3f} "
              f"({ev['rows'][0]:,} rows a position, {len(held)} windows); along greedy chains (alpha_k) "
              f"{' / '.join(f'{x:.3f}' for x in ev['acc_chain'])}, tau_chain {ev['tau_chain']:.3f} "
              f"({' / '.join(f'{n:,}' for n in ev['chain_rows'])} rows)", flush=True)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == '__main__':
    main()
