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
