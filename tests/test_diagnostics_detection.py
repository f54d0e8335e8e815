"""Every verdict kind fires for its emulated failure and for no other: Llama, Qwen3 and DeepSeek-V3 tiny targets
(seeds and sample lengths unlike the notebook's), variants of each failure, and SmolLM2 (slow)."""
import pytest, torch
from eagle_nb.target import tiny_target, load_target
from eagle_nb.diagnostics import capture_states, compare, demo_samples, default_taps
from eagle_nb.emulators import (detection_table, detection_cases, engine_extraction, delta_extraction, tp_partial_extraction,
                                drop_prefix_rows, shift_rows, scale_states, inject_nonfinite, cast_states, token_mismatch_extraction,
                                perturb_states)

pytestmark = pytest.mark.usefixtures('one_torch_thread')


TINY = [('llama', 101, 7, 24, 200), ('qwen3', 202, 8, 90, 150), ('deepseek_v3', 303, 9, 30, 110)]

def _show(tab):
    return '\n' + tab.drop(columns=['seconds']).rename(columns=lambda c: c[:10]).to_string()

@pytest.mark.parametrize('arch,seed,sample_seed,lo,hi', TINY, ids=[t[0] for t in TINY])
def test_detection_table_tiny(arch, seed, sample_seed, lo, hi):
    t = tiny_target(arch, seed=seed)
    s = demo_samples(t, 5, lo, hi, seed=sample_seed)
    cases = detection_cases(t, s, composite=True)
    tab, comps = detection_table(t, s, cases=cases)
    assert tab['ok'].all(), _show(tab) + '\n' + '\n'.join(comps[k].report() for k in tab.index[~tab['ok']])
    assert comps['same states, bfloat16'].usable and not comps['NaN rows'].usable

@pytest.fixture(scope='module')
def qwen():
    t = tiny_target('qwen3', seed=404)
    s = demo_samples(t, 6, 32, 96, seed=11)
    return t, s, capture_states(t, s)

VARIANTS = {
    'radix rows stored with cut ids': (lambda t, s, taps, cap: drop_prefix_rows(cap(), 9, style='ids'), {'missing_tokens'}),
    'radix rows zero-filled': (lambda t, s, taps, cap: drop_prefix_rows(cap(), 5, style='zeros'), {'missing_tokens'}),
    'rows two tokens early': (lambda t, s, taps, cap: shift_rows(cap(), -2), {'position_shift'}),
    'TP=4, rank 3': (lambda t, s, taps, cap: tp_partial_extraction(t, s, taps, ranks=4, rank=3), {'partial_sum'}),
    'TP=2, MLP all-reduce only': (lambda t, s, taps, cap: tp_partial_extraction(t, s, taps, parts=('mlp',)), {'partial_sum'}),
    'delta in bf16, stored bf16': (lambda t, s, taps, cap: cast_states(delta_extraction(t, s, taps, dtype=torch.bfloat16)), {'residual_missing'}),
    'pre-norm final stored bf16': (lambda t, s, taps, cap: cast_states(engine_extraction(t, s, 'vllm', taps)), {'norm_mismatch'}),
    'scale 3 stored bf16': (lambda t, s, taps, cap: cast_states(scale_states(cap(), 3.0)), {'scale'}),
    'Inf instead of NaN': (lambda t, s, taps, cap: inject_nonfinite(cap(), rows=1, samples=1, value=float('inf')), {'nonfinite'}),
    'SGLang first_is_one rule, SpecForge ids': (lambda t, s, taps, cap: engine_extraction(t, s, 'sglang', [i - 1 for i in taps], believed='specforge', sglang_rule='first_is_one'), {'match'}),
    'SpecForge ids to SGLang (correct)': (lambda t, s, taps, cap: engine_extraction(t, s, 'sglang', [i - 1 for i in taps], believed='specforge'), {'match'}),
    'wide taps window, bf16 + batch 3': (lambda t, s, taps, cap: capture_states(t, s, [1, 2, 3, 4, 5, 6], batch_size=3, dtype=torch.bfloat16), {'match'}),
    'bf16 store of the reference': (lambda t, s, taps, cap: cast_states(cap()), {'match'}),
    'noise of no known cause': (lambda t, s, taps, cap: perturb_states(cap(), 0.2), {'mismatch'}),
    'TP=2 attention only, rank 1': (lambda t, s, taps, cap: tp_partial_extraction(t, s, taps, parts=('attn',), rank=1), {'partial_sum'}),
}

@pytest.mark.parametrize('name', list(VARIANTS))
def test_variants(qwen, name):
    t, s, ref = qwen
    taps = default_taps(t.num_layers)
    build, expected = VARIANTS[name]
    c = compare(ref, build(t, s, taps, lambda **kw: capture_states(t, s, taps, **kw)))
    assert set(c.kinds) == expected, c.report()

def test_offset_evidence_and_fix(qwen):
    t, s, ref = qwen
    taps = default_taps(t.num_layers)
    c = compare(ref, engine_extraction(t, s, 'vllm', [i - 1 for i in taps], believed='specforge'))
    v = c.verdicts.set_index('kind')
    ev = v.loc['layer_offset', 'evidence']
    assert ev['claimed'] == taps and ev['held'] == [i - 1 for i in taps] and ev['offsets'] == [-1]
    assert str(taps) in v.loc['layer_offset', 'fix'] and 'vLLM' in v.loc['layer_offset', 'fix']
    assert 'before the final norm' in v.loc['norm_mismatch', 'summary']
    c = compare(ref, engine_extraction(t, s, 'sglang', taps, believed='hf'))
    assert c.verdicts.iloc[0]['evidence']['offsets'] == [1] and str([i - 1 for i in taps]) in c.verdicts.iloc[0]['fix']

def test_missing_tokens_counts(qwen):
    t, s, ref = qwen
    b = drop_prefix_rows(capture_states(t, s, default_taps(t.num_layers)), lambda sid, T: 4 if sid.endswith(('1', '3')) else 0)
    c = compare(ref, b)
    ev = c.verdicts.set_index('kind').loc['missing_tokens', 'evidence']
    assert c.kinds == ['missing_tokens'] and ev['samples'] == 2 and ev['rows_missing_max'] == 4

def test_reference_with_only_the_taps(qwen):
    "A taps-only reference cannot locate an offset in its data, but the labels still say which ids B holds."
    t, s, _ = qwen
    taps = default_taps(t.num_layers)
    ref = capture_states(t, s, taps)
    c = compare(ref, engine_extraction(t, s, 'sglang', taps, believed='hf'))
    assert set(c.kinds) <= {'mismatch', 'layer_offset'} and not c.usable
    honest = engine_extraction(t, s, 'vllm', [i - 1 for i in taps], final=None)   # labels say HF taps-1, reference holds taps
    c = compare(ref, honest)
    assert c.kinds == ['layer_offset'] and c.verdicts.iloc[0]['evidence']['offsets'] == [-1]

@pytest.mark.slow
def test_detection_table_smollm2():
    t = load_target('smollm2-135m')
    s = demo_samples(t, 3, 40, 96, seed=2, source='sharegpt')
    tab, comps = detection_table(t, s, reference=capture_states(t, s, batch_size=3), cases=detection_cases(t, s, composite=True))
    assert tab['ok'].all(), _show(tab) + '\n' + '\n'.join(comps[k].report() for k in tab.index[~tab['ok']])
