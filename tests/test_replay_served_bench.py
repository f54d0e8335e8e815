"`bench/replay_served.py` end to end on the smoke target: continuations, their store, replayed drafters, reuse, and a refused mismatch."
import json, subprocess, sys
import torch
from train_helpers import ENV, ROOT, smoke_store
from eagle_nb.store import HiddenStateStore
from eagle_nb.train import TrainConfig, train

def run(args):
    return subprocess.run([sys.executable, str(ROOT/'bench'/'replay_served.py'), *args], env=ENV, capture_output=True, text=True, timeout=300)

def test_replay_served_builds_replays_and_reuses(tmp_path):
    path = smoke_store()
    tname = HiddenStateStore.open(path).manifest['target']['name']
    torch.set_num_threads(1)
    train(TrainConfig(store=path, out=str(tmp_path/'d'), ttt_steps=3, steps=12, lr=3e-3, batch_tokens=256, max_len=256,
                      compile=False, eval_fraction=0.1, amp=False))
    (tmp_path/'p.jsonl').write_text(''.join(json.dumps(dict(id=f'q{i}', prompt=p)) + '\n' for i, p in
                                            enumerate(['What is the capital of France?', 'def add(a, b):', 'Hello! How can I help you today?'])))
    args = ['--target', tname, '--prompts', str(tmp_path/'p.jsonl'), '--limit', '3', '--max-new-tokens', '24', '--work', str(tmp_path/'w'),
            '--drafter', f"a={tmp_path/'d'}", '--json', str(tmp_path/'r.json')]
    r = run(args)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert 'generated 3/3' in r.stdout
    res = json.loads((tmp_path/'r.json').read_text())
    a = res['drafters']['a']
    assert len(a['prompts']) == 3 and a['rounds'] == sum(p['rounds'] for p in a['prompts'].values()) > 0
    served = [json.loads(l) for l in (tmp_path/'w'/'served.jsonl').read_text().splitlines()]
    gen, stopped = {r['id']: sum(r['loss_mask']) for r in served}, {r['id']: r['stopped'] for r in served}
    assert all(n <= 24 + 3 for n in gen.values())                          # generated 3 past the limit (fewer at a stop token)
    for sid, p in a['prompts'].items():
        assert sum(p['accepted_hist']) == p['rounds'] and len(p['accepted_hist']) == 4
        made = 1 + sum((k + 1) * n for k, n in enumerate(p['accepted_hist']))   # the prefill's token, then each round's
        # rounds run until 24 are made; a last round that accepts the EOS it stopped at as a draft has no bonus token
        assert min(24, gen[sid]) <= made <= min(24 + 3, gen[sid] + stopped[sid]), (sid, made, gen[sid])
    assert 1 <= a['tau'] <= 4 and 0 < a['teacher_is_data'] <= 1
    again = run(args)                                                       # the continuations and store are reused
    assert again.returncode == 0 and 'generated' not in again.stdout
    assert json.loads((tmp_path/'r.json').read_text())['drafters']['a']['tau'] == a['tau']
    other = run([*args[:7], '32', *args[8:]])                               # another --max-new-tokens in the same work dir
    assert other.returncode != 0 and 'built for another configuration' in (other.stdout + other.stderr)
