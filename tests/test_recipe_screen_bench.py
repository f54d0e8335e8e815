"`bench/recipe_screen.py` end to end on the smoke store: variants trained, graded and replayed in one run; a finished one reused."
import json, subprocess, sys
from train_helpers import ENV, ROOT, smoke_store

def test_recipe_screen_trains_replays_and_reuses(tmp_path):
    run = tmp_path/'run'; run.mkdir()
    (run/'store').symlink_to(smoke_store())                                  # no data, no drafter: the store's own vocabulary
    (tmp_path/'p.jsonl').write_text(''.join(json.dumps(dict(id=f'q{i}', prompt=p)) + '\n' for i, p in
                                            enumerate(['What is the capital of France?', 'def add(a, b):'])))
    args = [sys.executable, str(ROOT/'bench'/'recipe_screen.py'), '--run', str(run), '--work', str(tmp_path/'w'), '--steps', '4',
            '--replay-work', str(tmp_path/'replay'), '--prompts', str(tmp_path/'p.jsonl'), '--limit', '2', '--max-new-tokens', '12',
            '--variant', 'base=--no-compile --batch-tokens 256 --max-len 256 --eval-fraction 0.2',
            '--variant', 'last=--no-compile --batch-tokens 256 --max-len 256 --eval-fraction 0.2 --init-layer target:last',
            '--json', str(tmp_path/'s.json')]
    r = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path/'s.json').read_text())
    assert set(res['variants']) == {'base', 'last'} and set(res['replay']['drafters']) == {'s-base', 's-last'}
    for n, v in res['variants'].items():
        cfg = json.loads((tmp_path/'w'/n/'train_config.json').read_text())
        assert cfg['total_steps'] == 4 and cfg['ttt_steps'] == 3 and cfg['lr'] == 0.001 and cfg['init_lm_head'] == 'target'
        assert cfg['init_layer'] == {'base': 'random', 'last': 'target:last'}[n]
        assert v['steps'] == 4 and len(v['train_acc1_by_fifth']) == 5
        assert len(v['acc']) == 3 and v['median_tokens_per_s'] > 0 and 0 < v['served_coverage'] <= 1 and v['train_coverage'] is None
        assert 1 <= res['replay']['drafters'][f's-{n}']['tau'] <= 4
    assert r.stdout.count('reusing') == 0 and 'base: trained' in r.stdout
    again = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=600)          # both finished: reused, not retrained
    assert again.returncode == 0 and again.stdout.count('reusing') == 2 and 'trained in' not in again.stdout
    assert json.loads((tmp_path/'s.json').read_text())['variants'] == res['variants']
    other = subprocess.run([*args[:-4], '--variant', 'base=--no-compile --batch-tokens 256 --max-len 256 --eval-fraction 0.2 --lr 0.002',
                            '--json', str(tmp_path/'s.json')], env=ENV, capture_output=True, text=True, timeout=600)
    assert other.returncode == 0 and 'base: trained' in other.stdout                        # another lr: trained again
    assert json.loads((tmp_path/'w'/'base'/'train_config.json').read_text())['lr'] == 0.002

def test_recipe_screen_epochs_and_paired_reading(tmp_path):
    "--epochs: each variant trains whole passes (the schedule of a full run); the variants after the first are read step by step against it."
    run = tmp_path/'run'; run.mkdir()
    (run/'store').symlink_to(smoke_store())
    (tmp_path/'p.jsonl').write_text(json.dumps(dict(id='q0', prompt='def add(a, b):')) + '\n')
    flags = '--no-compile --batch-tokens 256 --max-len 256 --eval-fraction 0.2'
    r = subprocess.run([sys.executable, str(ROOT/'bench'/'recipe_screen.py'), '--run', str(run), '--work', str(tmp_path/'w'), '--epochs', '1',
                        '--replay-work', str(tmp_path/'replay'), '--prompts', str(tmp_path/'p.jsonl'), '--limit', '1', '--max-new-tokens', '8',
                        '--variant', f'base={flags}', '--variant', f'last={flags} --init-layer target:last',
                        '--variant', f'seed1={flags} --seed 1', '--json', str(tmp_path/'s.json')],
                       env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path/'s.json').read_text())
    assert res['epochs'] == 1 and res['steps'] is None
    cfgs = {n: json.loads((tmp_path/'w'/n/'train_config.json').read_text()) for n in ('base', 'last')}
    n = cfgs['base']['total_steps']
    assert n >= 10 and cfgs['last']['total_steps'] == n and all(c['epochs'] == 1 and c['steps'] == 0 for c in cfgs.values())
    assert res['variants']['base']['steps'] == res['variants']['last']['steps'] == n
    assert 'paired_last_fifth' not in res['variants']['base']                                   # the first variant is the reference
    pr = res['variants']['last']['paired_last_fifth']
    assert pr['against'] == 'base' and pr['steps'] == n // 5 and pr['se'] >= 0 and 0 <= pr['share_ahead'] <= 1
    assert -1 <= pr['mean_acc1_diff'] <= 1 and pr['mean_acc1_diff'] != 0            # a different start: not the same run twice
    assert len(res['variants']['last']['train_acc1_by_fortieth']) == 40 and 'paired against base' in r.stdout
    assert 'paired_last_fifth' not in res['variants']['seed1'] and 'seed1: not paired with base' in r.stdout   # another order: not paired
