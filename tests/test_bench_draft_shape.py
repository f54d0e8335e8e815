"""bench/bench_draft_shape.py measures several drafters in one run: every (drafter, shape) pair against the same plain
decoding, on the tests' tiny trained Llama with untrained drafters (τ ~ 1, every output must still be plain greedy's)."""
import json, os, subprocess, sys
from pathlib import Path
import pytest
from eagle_nb.train import smoke_target

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO/'bench'/'bench_draft_shape.py'

@pytest.fixture(scope='module')
def target(tmp_path_factory): return smoke_target(tmp_path_factory.mktemp('bench_shape')/'target')

def _run(target, *args):
    env = dict(os.environ, OMP_NUM_THREADS='1', EAGLE_NB_PROGRESS='0')
    return subprocess.run([sys.executable, str(BENCH), '--target', str(target), '--prompts', str(REPO/'configs'/'prompts'/'stdlib.jsonl'),
                           '--limit', '2', '--max-new-tokens', '6', *args], env=env, capture_output=True, text=True, timeout=300)

def test_two_drafters_in_one_run(target, tmp_path):
    r = _run(target, '--drafter', 'a=random-init', '--drafter', 'b=random-init', '--shapes', '1,2:2:3', '--json', str(tmp_path/'d.json'))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path/'d.json').read_text())
    assert [(s['drafter'], s['shape']) for s in doc['shapes']] == [('a', 'a: chain 1'), ('a', 'a: tree 2/2/3'), ('b', 'b: chain 1'), ('b', 'b: tree 2/2/3')]
    assert set(doc['drafter']) == {'a', 'b'} and set(doc['cost_model_floor']) == {'a', 'b'}
    for s in doc['shapes']:
        assert s['prompts'] == 2 and s['lossless_up_to_ties'] == 2 and s['tokens_per_s'] > 0 and s['tau'] >= 1.0, s
        assert s['passes_per_round'] >= 1 and 0 <= s['idle_passes_per_round'] < s['passes_per_round'], s
    assert 'b: tree 2/2/3' in r.stdout

def test_one_drafter_keeps_plain_names_and_names_must_differ(target, tmp_path):
    r = _run(target, '--shapes', '1,2', '--json', str(tmp_path/'d.json'))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path/'d.json').read_text())
    assert [s['shape'] for s in doc['shapes']] == ['chain 1', 'chain 2'] and doc['drafter']['kind'] == 'random-init'
    assert doc['cost_model_floor'] is not None and doc['cost_model_floor']['from_chains'] == [1, 2]
    r = _run(target, '--drafter', 'x=random-init', '--drafter', 'x=random-init', '--shapes', '1')
    assert r.returncode != 0 and 'names must differ' in r.stderr

def test_int8_both_measures_each_drafter_twice(target, tmp_path):
    r = _run(target, '--int8', 'both', '--shapes', '1', '--json', str(tmp_path/'d.json'))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path/'d.json').read_text())
    assert [s['shape'] for s in doc['shapes']] == ['bf16: chain 1', 'int8: chain 1']
    assert doc['drafter']['bf16']['int8'] is False and doc['drafter']['int8']['int8'] is True
    assert all(s['lossless_up_to_ties'] == s['prompts'] == 2 for s in doc['shapes'])
