"Regeneration in process (hf backend) on tiny targets: determinism, batching, modes, stops, degenerate answers, resume."
import json
from pathlib import Path

import pytest, torch
from eagle_nb.core import EagleNbError, read_json
from eagle_nb.target import tiny_target
from eagle_nb.regenerate import (HFBackend, RegenerateConfig, regenerate, regenerate_main, end_of_turn_ids, manifest_path, repeated_ngram_fraction,
                                 partial_path, turn_seed)


@pytest.fixture(autouse=True)
def one_thread():
    "Tiny models gain nothing from threads; on a busy shared CPU OpenMP spin-waits make them 10x slower."
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def U(c): return {'role': 'user', 'content': c}
def A(c): return {'role': 'assistant', 'content': c}

CONVS = [dict(id='sys2', messages=[{'role': 'system', 'content': 'Be brief.'}, U('Hello!'), A('Hi.'), U('What is the capital of France?'), A('Paris.')]),
         dict(id='one', messages=[U('def add(a, b):'), A('return a + b')]),
         dict(id='three', messages=[U('x'), A('y'), U('print("hello world")'), A('ok'), U('for i in range(10):'), A('...')]),
         dict(id='long', messages=[U('The quick brown fox jumps over the lazy dog. ' * 3), A('Indeed.')]),
         dict(id='short', messages=[U('Hi'), A('Hello')])]


def lines(p): return [json.loads(l) for l in Path(p).read_text().splitlines()]


@pytest.fixture(scope='module')
def qwen(): return tiny_target('qwen2')


@pytest.mark.parametrize('mode', ['last', 'all'])
def test_greedy_is_deterministic_and_batch_invariant(qwen, tmp_path, mode):
    runs = []
    for k, bs in enumerate([4, 1, 4]):
        regenerate(CONVS, HFBackend(qwen), tmp_path/f'{k}.jsonl', RegenerateConfig(mode=mode, max_new_tokens=10, batch_size=bs))
        runs.append((tmp_path/f'{k}.jsonl').read_bytes())
    assert runs[0] == runs[2]  # same output twice
    assert runs[0] == runs[1]  # batched == one at a time
    recs = lines(tmp_path/'0.jsonl')
    assert [r['id'] for r in recs] == [c['id'] for c in CONVS]  # original ids, dataset order
    n_answers = [len([m for m in r['messages'] if m['role'] == 'assistant']) for r in recs]
    assert n_answers == [2, 1, 3, 1, 1]  # as many assistant turns as the source, in both modes
    assert sum(len(r['regenerated']['turns']) for r in recs) == (8 if mode == 'all' else 5)


def test_generate_equals_plain_transformers_greedy(qwen):
    "Our batched, left-padded generation gives what a plain unpadded `generate` gives, cut at the end of turn."
    backend = HFBackend(qwen)
    prompts = [c['messages'][:1] for c in CONVS]
    gens = backend.generate(prompts, [0] * len(prompts), RegenerateConfig(max_new_tokens=10, batch_size=5))
    tok = qwen.tokenizer
    for p, g in zip(prompts, gens):
        ids = torch.tensor([tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)])
        with torch.no_grad():
            out = qwen.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                                      eos_token_id=end_of_turn_ids(tok, qwen.model), pad_token_id=tok.pad_token_id)
        assert g.text == tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        assert (g.finish_reason, g.completion_tokens, g.prompt_tokens) == ('length', 10, ids.shape[1])


def test_all_mode_feeds_generated_answers_forward(qwen, tmp_path):
    cfg = RegenerateConfig(mode='all', max_new_tokens=6)
    regenerate(CONVS[:1], HFBackend(qwen), tmp_path/'a.jsonl', cfg)
    msgs = lines(tmp_path/'a.jsonl')[0]['messages']
    assert [m['role'] for m in msgs] == ['system', 'user', 'assistant', 'user', 'assistant']
    assert msgs[2]['content'] != 'Hi.' and msgs[3]['content'] == 'What is the capital of France?'
    # the second answer is the target's answer to a context that holds its own first answer
    g = HFBackend(qwen).generate([msgs[:4]], [turn_seed(0, 'sys2', 1)], cfg)[0]
    assert g.text == msgs[4]['content']
    # 'last' keeps the original earlier turns
    regenerate(CONVS[:1], HFBackend(qwen), tmp_path/'l.jsonl', RegenerateConfig(mode='last', max_new_tokens=6))
    last = lines(tmp_path/'l.jsonl')[0]['messages']
    assert last[:4] == CONVS[0]['messages'][:4] and last[4]['role'] == 'assistant'


def test_sampling_is_seeded_per_turn(qwen, tmp_path):
    outs = {}
    for name, bs, seed in [('a', 4, 7), ('b', 1, 7), ('c', 4, 8)]:
        regenerate(CONVS, HFBackend(qwen), tmp_path/f'{name}.jsonl', RegenerateConfig(mode='all', max_new_tokens=10, temperature=0.9, top_p=0.95, seed=seed, batch_size=bs))
        outs[name] = [r['messages'] for r in lines(tmp_path/f'{name}.jsonl')]
    assert outs['a'] == outs['b']  # independent of batching
    assert outs['a'] != outs['c']  # depends on the seed
    rec = lines(tmp_path/'a.jsonl')[0]['regenerated']
    assert (rec['temperature'], rec['top_p'], rec['seed']) == (0.9, 0.95, 7)


def test_tiny_top_p_is_greedy(qwen):
    backend, prompts = HFBackend(qwen), [c['messages'][:1] for c in CONVS]
    greedy = backend.generate(prompts, [0] * 5, RegenerateConfig(max_new_tokens=8))
    nucleus = backend.generate(prompts, [1, 2, 3, 4, 5], RegenerateConfig(max_new_tokens=8, temperature=1.0, top_p=1e-6))
    assert [g.text for g in greedy] == [g.text for g in nucleus]


@pytest.mark.parametrize('arch,eot', [('qwen2', '<|im_end|>'), ('llama', '<|eot_id|>'), ('deepseek_v3', '<|end_of_sentence|>')])
def test_stops_at_the_templates_end_of_turn(tmp_path, arch, eot):
    "A target whose head always says end-of-turn answers nothing, in one token: 'stop', counted 'empty', droppable."
    t = tiny_target(arch, num_layers=2)
    eot_id = t.tokenizer.convert_tokens_to_ids(eot)
    assert end_of_turn_ids(t.tokenizer, t.model)[0] == eot_id
    head = t.model.lm_head
    with torch.no_grad():
        head.weight.zero_()
        t.model.lm_head = torch.nn.Linear(head.in_features, head.out_features, bias=True)
        t.model.lm_head.weight.zero_(); t.model.lm_head.bias.zero_(); t.model.lm_head.bias[eot_id] = 10.0
    g = HFBackend(t).generate([[U('Hello!')], [U('x')]], [0, 0], RegenerateConfig(max_new_tokens=8, batch_size=2))
    assert [(x.text, x.finish_reason, x.completion_tokens) for x in g] == [('', 'stop', 1)] * 2
    rep = regenerate(CONVS[:2], HFBackend(t), tmp_path/'e.jsonl', RegenerateConfig(max_new_tokens=8, drop_degenerate=True))
    assert (rep.written, rep.dropped, rep.degenerate) == (0, 2, {'empty': 2})
    rep = regenerate(CONVS[:2], HFBackend(t), tmp_path/'k.jsonl', RegenerateConfig(max_new_tokens=8))
    assert (rep.written, rep.dropped, rep.degenerate) == (2, 0, {'empty': 2})


def test_degenerate_answers_counted_and_dropped(qwen, tmp_path):
    "The random tiny target loops: every answer is degenerate (repetition at 40 tokens), all dropped on request."
    rep = regenerate(CONVS, HFBackend(qwen), tmp_path/'d.jsonl', RegenerateConfig(mode='all', max_new_tokens=40, drop_degenerate=True))
    assert rep.written == 0 and rep.dropped == 5 and rep.degenerate.get('repetition', 0) >= 4
    assert rep.turns == 5  # 'all' stops a conversation at its first degenerate answer when it will be dropped anyway
    assert (tmp_path/'d.jsonl').read_text() == ''
    assert read_json(manifest_path(tmp_path/'d.jsonl'))['report']['dropped'] == 5


def test_looping_answers_cut_and_kept(qwen, tmp_path):
    "cut_loops: the same looping answers cut where their loop starts and kept (drop_degenerate drops only those not cut); a resume with the other setting is refused."
    cfg = RegenerateConfig(mode='all', max_new_tokens=40, drop_degenerate=True, cut_loops=True)
    rep = regenerate(CONVS, HFBackend(qwen), tmp_path/'c.jsonl', cfg)
    recs = [json.loads(l) for l in (tmp_path/'c.jsonl').read_text().splitlines()]
    cut = [(r, t) for r in recs for t in r['regenerated']['turns'] if 'cut_at_loop' in t]
    # without cut_loops all 5 are dropped (above); with it those whose loops were cut are written (the report also counts
    # cuts in conversations dropped for a later answer that ran to the cap without looping)
    assert rep.cut_at_loop >= len(cut) >= 3 and rep.written == len(recs) >= 1 and rep.written + rep.dropped == 5
    for r, t in cut:
        text = r['messages'][t['message_index']]['content']
        assert t['degenerate'] in ('repetition', 'max_tokens') and len(text) <= t['cut_at_loop'] < 200
        assert repeated_ngram_fraction(text) < 0.5                        # what is left does not loop
    assert read_json(manifest_path(tmp_path/'c.jsonl'))['settings']['cut_loops'] is True
    assert 'cut where they loop' in rep.summary()
    with pytest.raises(EagleNbError, match='--overwrite'):
        regenerate(CONVS, HFBackend(qwen), tmp_path/'c.jsonl', RegenerateConfig(mode='all', max_new_tokens=40, drop_degenerate=True))


def test_prompts_too_long(qwen, tmp_path):
    "'last': a conversation whose prompt is too long is skipped; 'all': kept up to the last answerable turn."
    cfg = dict(max_new_tokens=4, max_prompt_tokens=40)
    rep = regenerate(CONVS, HFBackend(qwen), tmp_path/'l.jsonl', RegenerateConfig(mode='last', **cfg))
    assert rep.skipped == {'prompt_too_long': 3} and rep.written == 2
    rep = regenerate(CONVS, HFBackend(qwen), tmp_path/'a.jsonl', RegenerateConfig(mode='all', **cfg))
    recs = {r['id']: r for r in lines(tmp_path/'a.jsonl')}
    assert rep.truncated >= 1 and rep.skipped == {'prompt_too_long': 1}  # 'long' cannot even start
    t = recs['three']
    assert t['regenerated']['truncated'] and t['messages'][-1]['role'] == 'assistant'


def test_resume_after_torn_line_and_refuse_other_settings(qwen, tmp_path):
    cfg = RegenerateConfig(mode='all', max_new_tokens=6, batch_size=2)
    regenerate(CONVS, HFBackend(qwen), tmp_path/'ref.jsonl', cfg)
    # a run that got through one batch, and died while writing the next
    out = tmp_path/'out.jsonl'
    class Stop(Exception): pass
    import eagle_nb.regenerate as R
    real = R._answer_hf
    def dies(*a):
        it = real(*a); yield next(it); raise Stop
    R._answer_hf = dies
    try:
        with pytest.raises(Stop): regenerate(CONVS, HFBackend(qwen), out, cfg)
    finally: R._answer_hf = real
    log = partial_path(out)
    assert not out.exists() and len(log.read_text().splitlines()) == 3  # header + 2 conversations
    with open(log, 'a') as f: f.write('{"index": 4, "id": "short", "status": "o')
    with pytest.raises(EagleNbError, match='other settings'):
        regenerate(CONVS, HFBackend(qwen), out, RegenerateConfig(mode='all', max_new_tokens=7))
    rep = regenerate(CONVS, HFBackend(qwen), out, cfg)
    assert rep.resumed == 2 and rep.written == 5
    assert out.read_bytes() == (tmp_path/'ref.jsonl').read_bytes()
    assert not log.exists()
    assert regenerate(CONVS, HFBackend(qwen), out, cfg).already_complete
    with pytest.raises(EagleNbError, match='--overwrite'): regenerate(CONVS, HFBackend(qwen), out, RegenerateConfig(max_new_tokens=6))
    assert regenerate(CONVS, HFBackend(qwen), out, RegenerateConfig(max_new_tokens=6), overwrite=True).written == 5


def test_output_reads_back_with_the_data_loader(qwen, tmp_path):
    from eagle_nb.data import load_conversations
    regenerate(CONVS, HFBackend(qwen), tmp_path/'r.jsonl', RegenerateConfig(mode='all', max_new_tokens=6))
    convs, rep = load_conversations(tmp_path/'r.jsonl')
    assert [c.id for c in convs] == [c['id'] for c in CONVS] and not rep.skipped
    man = read_json(manifest_path(tmp_path/'r.jsonl'))
    assert man['settings']['target_config_hash'] == qwen.config_hash and man['engine']['backend'] == 'hf'
    assert man['records'] == 5 and man['report']['turns'] == 8


def test_cli(tmp_path):
    src = tmp_path/'in.jsonl'
    src.write_text(''.join(json.dumps(c) + '\n' for c in CONVS))
    args = ['--data', str(src), '--target', 'tiny-llama', '--mode', 'all', '--max-new-tokens', '5', '--limit', '3', '--out', str(tmp_path/'o.jsonl')]
    assert regenerate_main(args) == 0
    assert [r['id'] for r in lines(tmp_path/'o.jsonl')] == ['sys2', 'one', 'three']
    assert regenerate_main(args) == 0  # already complete
    with pytest.raises(EagleNbError, match='needs --target'): regenerate_main(['--data', str(src), '--out', 'x.jsonl'])
    with pytest.raises(EagleNbError, match="temperature"): regenerate_main(args[:-2] + ['--out', str(tmp_path/'p.jsonl'), '--temperature', '-1'])


@pytest.mark.slow
def test_smollm2_stops_at_im_end_and_batches_exactly(tmp_path):
    "The real target in fp32: a short answer ends at <|im_end|> while its batch neighbours go on; batched == single."
    from eagle_nb.target import load_target
    t = load_target('smollm2-135m', dtype=torch.float32)
    assert t.tokenizer.convert_ids_to_tokens(end_of_turn_ids(t.tokenizer, t.model)[0]) == '<|im_end|>'
    prompts = [[U('What is 2+2? Answer with a number only.')], [U('Write a long poem about the sea.')], [U('Name three colors.')]]
    b = HFBackend(t).generate(prompts, [0] * 3, RegenerateConfig(max_new_tokens=24, batch_size=3))
    s = HFBackend(t).generate(prompts, [0] * 3, RegenerateConfig(max_new_tokens=24, batch_size=1))
    assert [g.text for g in b] == [g.text for g in s]
    assert b[0].finish_reason == 'stop' and '4' in b[0].text and '<|im_end|>' not in b[0].text
    assert b[1].finish_reason == 'length' and b[1].completion_tokens == 24
