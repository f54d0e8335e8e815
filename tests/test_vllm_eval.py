"""Real vLLM serving eagle_nb's speculators export (EAGLE-3 chain) beside plain vLLM: `eagle-nb eval --engine vllm` reads vLLM's
spec-decode counters and checks losslessness; the plain server (prefix caching on, vLLM's default) is refused for extraction."""
import json
import torch
import pytest

pytestmark = pytest.mark.slow

from eagle_nb.core import EagleNbError

@pytest.fixture(scope='module')
def target():
    from eagle_nb.target import load_target
    return load_target('smollm2-135m')

@pytest.fixture(scope='module')
def servers(target, tmp_path_factory):
    from eagle_nb.drafter import export_speculators
    from eagle_nb.eval import random_init_drafter
    from eagle_nb.vllm import start_plain_and_spec
    run = tmp_path_factory.mktemp('vllm-eval')
    spec = export_speculators(random_init_drafter(target, seed=0), run/'speculators', speculative_tokens=3, verifier_name=str(target.path))
    srv = start_plain_and_spec(target.path, run, dict(model=str(spec), method='eagle3', num_speculative_tokens=3))   # as vllm_spec_eval starts its pair
    yield srv
    for s in srv.values(): s.stop()

def test_eval_engine_vllm_lossless_with_counters(servers, tmp_path, capsys):
    from eagle_nb.cli import eval_main            # `eagle-nb eval`: the CLI layer supplies --engine vllm
    out = tmp_path/'vllm.json'
    rc = eval_main(['--engine', 'vllm', '--target', 'smollm2-135m', '--drafter', 'random-init', '--prompts', 'humaneval', '--limit', '3',
                    '--max-new-tokens', '16', '--num-steps', '3', '--vllm-url', f"plain={servers['plain'].url}",
                    '--vllm-url', f"spec={servers['spec'].url}", '--concurrency', '3', '--json', '--out', str(out)])
    doc = json.loads(out.read_text())
    assert rc == 0 and doc['lossless']['sequential'] and doc['lossless']['prompts_equal'] == 3, doc['lossless']
    v = doc['vllm']['sequential']
    assert v['drafts'] > 0 and v['draft_tokens'] == 3 * v['drafts'] and len(v['accepted_per_pos']) == 3, v
    assert v['tau'] == pytest.approx(1 + v['accepted'] / v['drafts'])
    assert doc['speed']['plain']['sequential_tokens_per_s'] > 0 and doc['speed']['spec']['batch_tokens_per_s'] > 0
    assert abs(doc['tau_difference']) < 0.25, (v['tau'], doc['eagle_nb'])    # the same untrained drafter: both ~1

def test_iteration_cost_from_the_servers_own_logs(servers, target, tmp_path):
    "Each server logs its engine iterations: the eval reads the one-at-a-time run's decode steps (one a token past the first), none of the warm-up's or the batch's."
    from eagle_nb.vllm import vllm_spec_eval, vllm_eval_lines
    from eagle_nb.eval import load_eval_prompts
    prompts = load_eval_prompts('humaneval', target.tokenizer, 2)
    urls, logs = {k: s.url for k, s in servers.items()}, {k: s.log_path for k, s in servers.items()}
    doc = vllm_spec_eval(target, 'random-init', prompts, max_new_tokens=12, concurrency=2, run_dir=tmp_path, urls=urls, logs=logs, in_process=False)
    c = doc['cost']
    assert c['iterations']['plain'] == doc['speed']['plain']['sequential_tokens'] - len(prompts), (c, doc['speed']['plain'])
    assert c['iterations']['spec'] == doc['vllm']['sequential']['drafts'], (c, doc['vllm']['sequential'])
    assert 0 < c['plain_step_ms'] < c['wall_ms_per_iteration']['plain'] and 0 < c['spec_iteration_ms'] < c['wall_ms_per_iteration']['spec'], c
    assert c['spec_iteration_ms'] > c['plain_step_ms'], c            # a verify of 4 tokens and 3 drafts against one token
    assert any('where the time goes' in l for l in vllm_eval_lines(doc))
    for k in ('plain', 'spec'):   # the one-at-a-time run's phases by each server's own request timings
        ph = doc['phases'][k]
        assert ph['requests'] == len(prompts) and ph['generated'] == doc['speed'][k]['sequential_tokens'], (k, ph, doc['speed'][k])
        assert ph['prompt_tokens'] == sum(len(p.input_ids) for p in prompts) and 0 <= ph['cached_share'] <= 1, ph
        assert 0 < ph['prefill_s'] and 0 < ph['decode_s'] < doc['speed'][k]['sequential_s'] and ph['decode_tokens_per_s'] > 0, ph
    assert doc['speed']['decode_speedup'] == pytest.approx(doc['phases']['spec']['decode_tokens_per_s'] / doc['phases']['plain']['decode_tokens_per_s'])
    assert any('prefill and decode' in l for l in vllm_eval_lines(doc))
    assert vllm_spec_eval(target, 'random-init', prompts[:1], max_new_tokens=4, concurrency=1, run_dir=tmp_path/'nologs', urls=urls,
                          in_process=False)['cost'] is None        # servers given by URL alone: no log to read, no figures made up

def test_servers_started_together_run_on_their_own_cores(servers):
    "On a CPU host each server's model threads are bound where vllm_cpu_binds says (vLLM's log), not both to vLLM's first cores."
    from eagle_nb.vllm import vllm_cpu_binds
    for k, b in zip(('plain', 'spec'), vllm_cpu_binds(2)):
        if b is None: continue                                          # a GPU host, or the user's own VLLM_CPU_OMP_THREADS_BIND
        ids = [c for part in b.split(',') for c in (range(int(part.split('-')[0]), int(part.split('-')[-1]) + 1))]
        assert f'core ids={ids}' in servers[k].log_path.read_text(), (k, b)

def test_extraction_refuses_prefix_caching(servers, target):
    from eagle_nb.vllm import VllmSource
    with pytest.raises(EagleNbError, match='--no-enable-prefix-caching'):
        VllmSource(target, urls=[servers['plain'].url])

def test_tie_margins_read_the_plain_servers_own_logprobs(servers, target):
    "Where outputs part, the verdict reads plain vLLM's top-1 minus top-2 log-prob there; it agrees with the target's own logits."
    from eagle_nb.vllm import _generate, served_model, tie_margins
    from eagle_nb.eval import load_eval_prompts
    url = servers['plain'].url
    name = served_model(url)['id']
    ids = [p.input_ids for p in load_eval_prompts('humaneval', target.tokenizer, 2)]
    ref, _ = _generate(url, name, ids, 12, 1)
    d = [5, None]
    m = tie_margins(url, name, ids, ref, d)
    assert m[1] is None and isinstance(m[0], float) and m[0] >= 0, m
    with torch.inference_mode():   # the same step in process (bf16 too, other kernels): the top-2 logit gap of the same path
        logits = target.model(torch.tensor([list(ids[0]) + ref[0][:5]], device=target.device)).logits[0, -1].float()
    top = logits.topk(2).values
    assert abs(m[0] - float(top[0] - top[1])) < 0.5 + 0.05 * m[0], (m[0], float(top[0] - top[1]))
    wrong = [[ref[0][0] + 1] + ref[0][1:], ref[1]]     # a path the server does not take: no margin, so no tie is claimed
    assert tie_margins(url, name, ids, wrong, d)[0] is None
