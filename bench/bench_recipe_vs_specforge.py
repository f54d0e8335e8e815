#!/usr/bin/env python
"""eagle_nb's training recipe against SpecForge's, side by side on one store, graded by one ruler.

SpecForge is imported from a copy of its public repository given by `--specforge PATH` (github.com/sgl-project/SpecForge;
nothing of it is copied here). Its side is its own draft model (`LlamaForCausalLMEagle3`, sdpa attention, bf16 weights),
its own TTT loop and loss (`OnlineEagle3Model`, `Eagle3TrainStrategy`: 0.8^i step weights, `TargetHead.preprocess`
shift), its own `BF16Optimizer` (AdamW over fp32 masters, clip 0.5, cosine with 1.5% warmup) at its defaults:
lr 1e-4, batch 1, TTT 7, samples shuffled each epoch. One shim, labelled: its loss kernel `LogSoftmaxLoss` is Triton
(GPU only), so `specforge.core.loss` is replaced by a module whose `LogSoftmaxLoss.apply` runs SpecForge's own eager
reference `_compute_loss` (read from the same file; same value: sum over masked rows / (B*T)).

eagle_nb's side is `eagle-nb train` (one run per `--recipe NAME=FLAGS`, default: its defaults). Both train on the
same training split (`eagle_nb.train.heldout_split`, fraction 0.05, seed 0) and are graded by `eagle_nb.train.evaluate`
on the same held-out samples: SpecForge's weights are loaded into eagle_nb's drafter (every key checked; step-0
logits of both implementations compared first). The table gives per-TTT-position top-1 accuracy, tau_sim, tokens/s
(training tokens / training process wall-clock) and wall-clock. Each side runs in its own process, one at a time.

    python bench/bench_recipe_vs_specforge.py --specforge /tmp/specforge [--conversations 60] [--epochs 1] \
        [--recipe 'default=' --recipe 'b512=--batch-tokens 512'] [--threads 1]

Default size (measured on the shared 2-core machine at 1 thread, load ~6-10): 60 conversations -> 139 windows of
<= 512 tokens (52,748 tokens), 17 held out, 122 trained (46,092 tokens) for one epoch: eagle_nb ~100-170 s CPU
(200-420 s wall) per recipe, SpecForge 157 s CPU (359 s wall), prepare + extract ~1 min CPU once. The issue's size
(1,045 windows, 412K tokens, 2 epochs) is about `--conversations 400 --epochs 2`.
"""
import argparse, json, os, resource, shlex, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def args():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--specforge', default='', help='path of a SpecForge checkout (its repository root)')
    ap.add_argument('--conversations', type=int, default=60, help='ShareGPT conversations to prepare (split into <= max-len windows)')
    ap.add_argument('--max-len', type=int, default=512, help='tokens per window (policy split)')
    ap.add_argument('--draft-vocab', type=int, default=8192, help='draft vocabulary size')
    ap.add_argument('--epochs', type=int, default=1, help='passes over the training split (both sides)')
    ap.add_argument('--eval-fraction', type=float, default=0.15, help='share of sample ids held out (eagle_nb heldout_split, seed 0)')
    ap.add_argument('--recipe', action='append', default=[], help="NAME=FLAGS: an eagle_nb run with these extra `eagle-nb train` flags (repeatable; default 'default=')")
    ap.add_argument('--skip-specforge', action='store_true', help='only the eagle_nb recipes')
    ap.add_argument('--specforge-lr', type=float, default=1e-4, help='SpecForge learning rate (its default 1e-4)')
    ap.add_argument('--threads', type=int, default=1, help='torch threads for every side')
    ap.add_argument('--holdout', type=int, default=0, help='conversations held out by id at prepare (the sharegpt-heldout prompts of --serve)')
    ap.add_argument('--serve', action='store_true', help='also serve every drafter with eagle_nb\'s decoder (chain, --num-steps) on held-out prompts')
    ap.add_argument('--prompts', default=f'humaneval,sharegpt-heldout,{ROOT}/configs/prompts/stdlib.jsonl', help='--serve prompt sets')
    ap.add_argument('--limit', type=int, default=8, help='--serve prompts per set')
    ap.add_argument('--max-new-tokens', type=int, default=64, help='--serve tokens per prompt')
    ap.add_argument('--num-steps', type=int, default=3, help='--serve chain length')
    ap.add_argument('--work', default='', help='work directory (default: _runs/bench-recipe)')
    ap.add_argument('--json', default='', help='also write the results here')
    ap.add_argument('--side', default='', help=argparse.SUPPRESS)   # internal: 'specforge' runs that side in this process
    ap.add_argument('--store', default='', help=argparse.SUPPRESS)
    ap.add_argument('--out', default='', help=argparse.SUPPRESS)
    return ap.parse_args()


def split_of(store_dir, max_len, fraction):
    "(train ids, held-out ids -> length) exactly as `eagle_nb.train.train` splits the store."
    from eagle_nb.store import HiddenStateStore
    from eagle_nb.train import heldout_split
    m = HiddenStateStore.open(store_dir).manifest
    lengths = {s['id']: min(int(s['length']), max_len) for s in m['samples'] if s['length'] >= 3}
    train_ids, held_ids = heldout_split(sorted(lengths), fraction, 0)
    return train_ids, {i: lengths[i] for i in held_ids}


# ---- SpecForge side (own process) --------------------------------------------------------------------------------
def import_specforge(path):
    "Import SpecForge's EAGLE-3 training pieces from `path`, with the CPU shim for its Triton loss kernel."
    import ast, types, torch
    from torch import nn
    sys.path.insert(0, str(path))
    loss_file = Path(path)/'specforge/core/loss.py'
    fn = next(n for n in ast.parse(loss_file.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == '_compute_loss')
    fn.decorator_list = []                      # SHIM: SpecForge's own eager reference loss, compiled as SpecForge does
    ns = {'torch': torch, 'nn': nn}
    exec(compile(ast.Module([fn], []), str(loss_file), 'exec'), ns)
    shim = types.ModuleType('specforge.core.loss')
    shim._compute_loss = torch.compile(ns['_compute_loss'], dynamic=None)
    class LogSoftmaxLoss:  # same contract as the Triton autograd.Function: mean over B*T rows of the masked soft CE
        apply = staticmethod(lambda logits, target, mask: shim._compute_loss(logits, target, mask))
    shim.LogSoftmaxLoss = LogSoftmaxLoss
    sys.modules['specforge.core.loss'] = shim
    from specforge.algorithms.eagle3.model import OnlineEagle3Model
    from specforge.modeling.auto import AutoDraftModel
    from specforge.modeling.target.target_head import TargetHead
    from specforge.optimizer import BF16Optimizer
    from specforge.runtime.contracts import TrainBatch
    from specforge.training.strategies.base import Eagle3TrainStrategy
    return dict(OnlineEagle3Model=OnlineEagle3Model, AutoDraftModel=AutoDraftModel, TargetHead=TargetHead,
                BF16Optimizer=BF16Optimizer, TrainBatch=TrainBatch, Eagle3TrainStrategy=Eagle3TrainStrategy)


def specforge_side(a):
    import random, torch
    from torch import nn
    from transformers import AutoConfig
    from safetensors.torch import save_file
    from eagle_nb.store import HiddenStateStore
    from eagle_nb.train import TrainConfig, load_target_heads, resolve_draft_vocab
    from eagle_nb.drafter import DrafterConfig, Eagle3Drafter, vocab_map, export_sglang
    torch.set_num_threads(a.threads)
    sf = import_specforge(a.specforge)
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    store = HiddenStateStore.open(a.store)
    m = store.manifest
    tgt, embed, head_w = load_target_heads(m['target']['name'])
    token_ids, _ = resolve_draft_vocab(TrainConfig(store=a.store, out=str(out)), store)   # the same draft vocab as eagle_nb
    d2t, t2d = vocab_map(token_ids, tgt.vocab_size)
    dcfg = DrafterConfig.from_target(tgt, len(token_ids), store.layer_ids)
    export_sglang(Eagle3Drafter(dcfg, embed), out/'sglang-config', dtype='float32')          # only its config.json is used
    cfg = AutoConfig.from_pretrained(out/'sglang-config')

    # its draft model, built as SpecForge's build_eagle3_draft does: its own init, target embedding frozen, bf16
    torch.manual_seed(0)
    draft = sf['AutoDraftModel'].from_config(cfg, attention_backend='sdpa', torch_dtype=torch.float32)
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(embed); draft.d2t.copy_(d2t); draft.t2d.copy_(t2d)
    draft.freeze_embedding()

    # ruler check: SpecForge's step-0 forward == eagle_nb's drafter holding the same weights (fp32)
    ours = Eagle3Drafter(dcfg, embed).set_vocab(d2t, t2d)
    sd = {k: v for k, v in draft.state_dict().items() if k != 'embed_tokens.weight'}
    missing, unexpected = ours.load_state_dict(sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    s0 = store.get(m['samples'][0]['id'])
    T = min(len(s0['input_ids']), 64)
    aux, ids = s0['aux'][:T].reshape(1, T, -1).float(), s0['input_ids'][1:T + 1][None]
    with torch.no_grad():
        h = draft.backbone(draft.embed_input_ids(ids), draft.project_hidden_states(aux), [[], []],
                           draft.prepare_decoder_attention_mask(torch.ones(1, ids.shape[1], dtype=torch.bool), aux, 1, ids.shape[1], 0),
                           torch.arange(ids.shape[1])[None])
        diff = float((draft.compute_logits(h) - ours(aux[:, :ids.shape[1]], ids, steps=1)[0]).abs().max())
    print(f"specforge vs eagle_nb step-0 logits (fp32, same weights): max abs diff {diff:.2e}", flush=True)
    assert diff < 1e-3, diff
    del ours

    draft = draft.to(torch.bfloat16)
    model = sf['OnlineEagle3Model'](draft_model=draft, length=7, attention_backend='sdpa').to(torch.bfloat16)
    head = sf['TargetHead'](str(tgt.path))
    with torch.no_grad(): head.fc.weight.copy_(head_w)
    head.freeze_weights(); head = head.eval().to(torch.bfloat16)
    strategy = sf['Eagle3TrainStrategy'](model, target_head=head)
    train_ids, _ = split_of(a.store, a.max_len, a.eval_fraction)
    total = a.epochs * len(train_ids)
    opt = sf['BF16Optimizer'](model, lr=a.specforge_lr, max_grad_norm=0.5, warmup_ratio=0.015, lr_scheduler='cosine', total_steps=total)
    rng, step, tokens, t0, log, gnorms = random.Random(0), 0, 0, time.time(), [], []
    for epoch in range(a.epochs):
        order = list(train_ids); rng.shuffle(order)
        for sid in order:
            s = store.get(sid, dtype=torch.bfloat16)
            L = min(len(s['input_ids']), a.max_len)
            tensors = dict(input_ids=s['input_ids'][:L][None], loss_mask=s['loss_mask'][:L].long()[None],
                           attention_mask=torch.ones(1, L, dtype=torch.long), hidden_state=s['aux'][:L].reshape(1, L, -1),
                           target=s['final'][:L][None])
            res = strategy.forward_loss(sf['TrainBatch'](sample_ids=[sid], strategy='eagle3', tensors=tensors,
                                                         metadata={'target_repr': 'hidden_state'}))
            res.loss.backward()
            opt.step()
            step += 1; tokens += L; gnorms.append(float(opt.last_grad_norm))
            if step % 50 == 0 or step == total:
                acc = [round(float(x), 3) for x in res.metrics['acces']]
                log.append(dict(step=step, loss=float(res.loss), acc=acc, lr=opt.get_learning_rate(), grad_norm=float(opt.last_grad_norm),
                                tokens_per_s=tokens / (time.time() - t0)))
                print(json.dumps(log[-1]), flush=True)
    seconds = time.time() - t0
    save_file({k: v.float().contiguous() for k, v in draft.state_dict().items() if k != 'embed_tokens.weight'}, str(out/'specforge.safetensors'))
    (out/'specforge.json').write_text(json.dumps(dict(steps=step, tokens=tokens, train_seconds=seconds, logit_diff=diff, log=log,
                                                  grad_norm_min=min(gnorms), grad_norm_median=sorted(gnorms)[len(gnorms) // 2])))


# ---- the ruler ---------------------------------------------------------------------------------------------------
def grade(store_dir, held_len, drafter, max_len):
    "eagle_nb.train.evaluate on the held-out samples, the same call `train` makes at its end."
    import torch
    from eagle_nb.core import fast_dtype
    from eagle_nb.store import HiddenStateStore
    from eagle_nb.train import TTTObjective, TargetHead, DistInfo, evaluate, prepare_batch, load_target_heads
    dev = torch.device('cpu'); dt = fast_dtype(dev)
    store = HiddenStateStore.open(store_dir)
    _, _, head_w = load_target_heads(store.manifest['target']['name'])
    token_ids = (drafter.d2t + torch.arange(len(drafter.d2t))).long()
    head = TargetHead(head_w, token_ids, device=dev, dtype=dt)
    t2d = drafter.t2d
    load = lambda ids: prepare_batch([store.get(i, dtype=dt) for i in ids], 7, head, t2d, len(token_ids), max_len, dev, dt)
    return evaluate(TTTObjective(drafter.eval(), 7), load, held_len, 7, DistInfo(device=dev), amp=True, batch_tokens=2048)


def main():
    a = args()
    if a.side == 'specforge': return specforge_side(a)
    from eagle_nb.core import machine_info
    if not a.skip_specforge and not (Path(a.specforge)/'specforge/algorithms/eagle3/model.py').exists():
        sys.exit(f"--specforge {a.specforge!r}: not a SpecForge checkout (specforge/algorithms/eagle3/model.py missing); "
                 f"clone github.com/sgl-project/SpecForge and pass its root, or use --skip-specforge")
    work = Path(a.work) if a.work else ROOT/'_runs'/'bench-recipe'
    tag = f"c{a.conversations}-L{a.max_len}-v{a.draft_vocab}" + (f"-h{a.holdout}" if a.holdout else '')
    if a.serve and 'sharegpt-heldout' in a.prompts and not a.holdout:
        sys.exit("--serve with sharegpt-heldout prompts needs --holdout N (conversations held out by id at prepare)")
    data, store = work/f'data-{tag}', work/f'store-{tag}'
    env = {**os.environ, 'EAGLE_NB_PROGRESS': '0', 'OMP_NUM_THREADS': str(a.threads), 'MKL_NUM_THREADS': str(a.threads)}

    def run(stage, cmd):
        print(f"\n== {stage}: {shlex.join(cmd)}", flush=True)
        t0, c0 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run(cmd, env=env, cwd=ROOT, text=True, capture_output=True)
        if r.returncode:
            print(r.stdout[-4000:], r.stderr[-4000:], sep='\n'); sys.exit(f"{stage} failed ({r.returncode})")
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)   # CPU seconds: robust on a shared machine
        print(f"   {stage}: {time.time() - t0:.0f} s wall, {cpu:.0f} s CPU", flush=True)
        return r, time.time() - t0, cpu

    nb = lambda *x: [str(BIN/'eagle-nb'), *map(str, x)]
    if not (data/'manifest.json').exists():
        run('prepare', nb('prepare', '--data', 'sharegpt', '--target', 'smollm2-135m', '--max-len', a.max_len, '--policy', 'split',
                          '--limit', a.conversations, '--draft-vocab', a.draft_vocab, '--out', data,
                          *(['--holdout', a.holdout] if a.holdout else [])))
    if not json.loads((store/'manifest.json').read_text()).get('complete') if (store/'manifest.json').exists() else True:
        run('extract', nb('extract', '--data', data, '--target', 'smollm2-135m', '--out', store))
    train_ids, held_len = split_of(store, a.max_len, a.eval_fraction)
    from eagle_nb.store import HiddenStateStore
    m = HiddenStateStore.open(store).manifest           # format v2: the samples come from its shard log
    n_tok = sum(min(int(s['length']), a.max_len) for s in m['samples'] if s['id'] in set(train_ids))
    print(f"store {store}: {len(train_ids)} training samples ({n_tok:,} tokens), {len(held_len)} held out; {a.epochs} epoch(s); {a.threads} thread(s)")

    import torch
    torch.set_num_threads(a.threads)
    from eagle_nb.drafter import load_drafter, DrafterConfig, Eagle3Drafter
    from eagle_nb.train import load_target_heads
    tgt, embed, _ = load_target_heads(m['target']['name'])
    rows = []
    def serve(row, drafter_dir):
        "eagle_nb's in-process speculative decoder (checked lossless) on held-out prompts: tau, alpha_k, speed-up per set."
        if not a.serve: return
        from eagle_nb.eval import EvalConfig, run_eval
        t0 = time.time()
        res = run_eval(EvalConfig(drafter=str(drafter_dir), target=m['target']['name'], prompts=a.prompts, dataset=str(data),
                                  limit=a.limit, max_new_tokens=a.max_new_tokens, num_steps=a.num_steps))
        sets = {Path(s).stem: v for s, v in res.per_set().items()}
        row['served'] = dict(sets=sets, seconds=round(time.time() - t0, 1), prompts_per_set=a.limit,
                             max_new_tokens=a.max_new_tokens, num_steps=a.num_steps)
        print(f"   served [{row['side']}]: " + ', '.join(f"{k} tau {v['tau']:.3f}" for k, v in sets.items()), flush=True)
    def save():  # after every side, so a long run keeps what it measured
        if a.json: Path(a.json).write_text(json.dumps(dict(rows=rows, heldout=len(held_len), train_samples=len(train_ids),
                                                           train_tokens=n_tok, epochs=a.epochs, threads=a.threads, machine=machine_info(),
                                                           argv=sys.argv[1:]), indent=1))
    for spec in (a.recipe or ['default=']):
        name, _, flags = spec.partition('=')
        out = work/f'eagle-{tag}-e{a.epochs}-{name}'
        _, wall, cpu = run(f'eagle_nb [{name}]', nb('train', '--store', store, '--out', out, '--epochs', a.epochs, '--max-len', a.max_len,
                                           '--eval-fraction', a.eval_fraction, '--no-resume', *shlex.split(flags)))
        recs = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines() if l.strip()]
        tr = [r for r in recs if r.get('kind') == 'train']
        seen = {r['step']: sum(x['tokens'] for x in tr if x['step'] <= r['step']) for r in tr}
        curve = [dict(step=r['step'], tokens=seen.get(r['step'], 0), tau_sim=r['tau_sim'], acc=r['acc'])   # --eval-every points
                 for r in recs if r.get('kind') == 'eval']
        ev = grade(store, held_len, load_drafter(out, embed_weight=embed), a.max_len)
        rows.append(dict(side=f'eagle_nb {name}', flags=flags, steps=len(tr), tokens=sum(r['tokens'] for r in tr), wall_s=wall, cpu_s=cpu,
                         step_s=sum(r['seconds'] for r in tr), curve=curve, **{k: ev[k] for k in ('acc', 'tau_sim', 'loss')}))
        serve(rows[-1], out)
        save()
    if not a.skip_specforge:
        out = work/f'specforge-{tag}-e{a.epochs}-lr{a.specforge_lr:g}'
        _, wall, cpu = run('specforge', [sys.executable, __file__, '--side', 'specforge', '--specforge', a.specforge, '--store', str(store),
                                    '--out', str(out), '--epochs', str(a.epochs), '--max-len', str(a.max_len), '--threads', str(a.threads),
                                    '--eval-fraction', str(a.eval_fraction), '--specforge-lr', str(a.specforge_lr)])
        info = json.loads((out/'specforge.json').read_text())
        from safetensors.torch import load_file
        sd = load_file(str(out/'specforge.safetensors'))
        from eagle_nb.train import TrainConfig, resolve_draft_vocab
        from eagle_nb.store import HiddenStateStore
        hs = HiddenStateStore.open(store)
        token_ids, _ = resolve_draft_vocab(TrainConfig(store=str(store), out=str(out)), hs)
        d = Eagle3Drafter(DrafterConfig.from_target(tgt, len(token_ids), hs.layer_ids), embed)
        missing, unexpected = d.load_state_dict(sd, strict=False)
        if missing or unexpected: sys.exit(f"SpecForge weights do not fit eagle_nb's drafter: missing {missing}, unexpected {unexpected}")
        ev = grade(store, held_len, d, a.max_len)
        rows.append(dict(side='specforge', flags=f'lr {a.specforge_lr:g} batch 1', steps=info['steps'], tokens=info['tokens'], wall_s=wall, cpu_s=cpu,
                         step_s=info['train_seconds'], **{k: ev[k] for k in ('acc', 'tau_sim', 'loss')}))
        if a.serve:   # SpecForge's weights as an eagle_nb checkpoint, so one decoder serves both
            from eagle_nb.drafter import save_drafter
            from eagle_nb.train import store_lineage
            save_drafter(d, out/'drafter', extra=dict(source='specforge', steps=info['steps']), lineage=store_lineage(store))
            serve(rows[-1], out/'drafter')
        save()

    ref = next((r for r in rows if r['side'] == 'specforge'), None)
    print(f"\nheld out: {len(held_len)} samples, graded by eagle_nb.train.evaluate (top-1 per TTT position, tau_sim = sum_k prod_i<=k acc_i)")
    print(f"{'side':28} {'steps':>6} {'tok/s':>7} {'wall s':>7} {'CPU s':>6}  {'acc per TTT position':44} {'tau_sim':>7} {'vs SF':>6}")
    for r in rows:
        ratio = f"{r['tau_sim'] / ref['tau_sim']:.2f}x" if ref and ref['tau_sim'] > 0 else ''
        print(f"{r['side'][:28]:28} {r['steps']:6d} {r['tokens'] / r['wall_s']:7.0f} {r['wall_s']:7.0f} {r['cpu_s']:6.0f}  "
              f"{' '.join(f'{x:.3f}' for x in r['acc']):44} {r['tau_sim']:7.3f} {ratio:>6}")
    if a.serve:
        sets = list(rows[0]['served']['sets'])
        print(f"\nserved by eagle_nb's decoder (chain {a.num_steps}, {a.limit} prompts x {a.max_new_tokens} tokens per set): tau per set, alpha_1..k and speed-up on all")
        print(f"{'side':28} " + ' '.join(f'{s[:16]:>16}' for s in sets) + f"  {'alpha (all)':24} {'speed-up':>8} {'vs SF':>6}")
        ref_tau = ref['served']['sets']['all']['tau'] if ref else None
        for r in rows:
            sv = r['served']['sets']
            ratio = f"{sv['all']['tau'] / ref_tau:.2f}x" if ref_tau else ''
            print(f"{r['side'][:28]:28} " + ' '.join(f"{sv[s]['tau']:16.3f}" for s in sets) + '  ' +
                  f"{' '.join('-' if x is None else f'{x:.3f}' for x in sv['all']['alpha']):24} {sv['all']['speedup']:7.2f}x {ratio:>6}")
    save()


if __name__ == '__main__':
    main()
