"""Exports to SGLang (LlamaForCausalLMEagle3) and vLLM speculators (Eagle3Speculator).

Each test lists what the upstream loader reads, citing the file, and checks every key, shape and config field.
The loaders' name mapping is re-implemented here from their documented behaviour (not copied) to prove that
every parameter of the engine's model is filled: both engines *silently skip* names they do not know.
"""
import json
import pytest
import torch
from pathlib import Path
from safetensors import safe_open

from eagle_nb.core import EagleNbError
from eagle_nb.target import tiny_target
from eagle_nb.drafter import (DrafterConfig, Eagle3Drafter, vocab_map, save_drafter, load_drafter, export_sglang,
                              export_speculators, export_drafter, export_main, sglang_aux_ids, canonical_from_sglang)


@pytest.fixture(scope='module')
def setup():
    t = tiny_target('qwen3', seed=1)  # head_dim given explicitly in its config (16) like SmolLM2
    c = DrafterConfig.from_target(t, 80)
    torch.manual_seed(0)
    d = Eagle3Drafter(c, t.model.get_input_embeddings().weight).eval()
    d.set_vocab(*vocab_map(torch.randperm(c.vocab_size, generator=torch.Generator().manual_seed(2))[:80], c.vocab_size))
    g = torch.Generator().manual_seed(3)
    aux = torch.randn(1, 10, 3 * c.hidden_size, generator=g); ids = torch.randint(0, c.vocab_size, (1, 10), generator=g)
    return t, c, d, aux, ids


def tensors(path: Path) -> dict:
    with safe_open(str(path/'model.safetensors'), 'pt') as f: return {k: f.get_tensor(k) for k in f.keys()}


def expected_shapes(c, layer_prefix):
    H, I, a, g, hd = c.hidden_size, c.intermediate_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
    p = layer_prefix
    return {'fc.weight': (H, 3 * c.target_hidden_size),
            f'{p}.hidden_norm.weight': (H,), f'{p}.input_layernorm.weight': (H,), f'{p}.post_attention_layernorm.weight': (H,),
            f'{p}.self_attn.q_proj.weight': (a * hd, 2 * H), f'{p}.self_attn.k_proj.weight': (g * hd, 2 * H),
            f'{p}.self_attn.v_proj.weight': (g * hd, 2 * H), f'{p}.self_attn.o_proj.weight': (H, a * hd),
            f'{p}.mlp.gate_proj.weight': (I, H), f'{p}.mlp.up_proj.weight': (I, H), f'{p}.mlp.down_proj.weight': (H, I),
            'norm.weight': (H,), 'lm_head.weight': (c.draft_vocab_size, H),
            'd2t': (c.draft_vocab_size,), 't2d': (c.vocab_size,)}


def emulate_stacked_loader(names, prefix_rule, skip):
    """Name mapping shared by SGLang's LlamaForCausalLMEagle3.load_weights and vLLM's Eagle3LlamaForCausalLM:
    q/k/v_proj -> qkv_proj (shards q, k, v), gate/up_proj -> gate_up_proj (shards 0, 1); returns {param: [shards]}."""
    stacked = {'.q_proj': ('.qkv_proj', 'q'), '.k_proj': ('.qkv_proj', 'k'), '.v_proj': ('.qkv_proj', 'v'),
               '.gate_proj': ('.gate_up_proj', 0), '.up_proj': ('.gate_up_proj', 1)}
    filled = {}
    for name in names:
        if any(s in name for s in skip): continue
        shard = None
        for w, (pn, sid) in stacked.items():
            if w in name: name, shard = name.replace(w, pn), sid; break
        filled.setdefault(prefix_rule(name), []).append(shard)
    return filled


# ---------------------------------------------------------------------------------------------------------------
# SGLang. Read by:
#  python/sglang/srt/models/llama_eagle3.py  LlamaForCausalLMEagle3 / LlamaModel / LlamaDecoderLayer:
#    config.hidden_size, intermediate_size, rms_norm_eps, vocab_size (embed_tokens), draft_vocab_size (lm_head),
#    tie_word_embeddings (must be false or lm_head = embed_tokens), target_hidden_size (fc = 3*target_hidden),
#    num_hidden_layers (>1 adds BasicDecoderLayers), bias (fc bias, default false), rope_scaling (mrope check);
#    load_weights: d2t -> hot_token_id = d2t + arange, t2d skipped, q/k/v and gate/up stacked, other names
#    prefixed 'model.' unless already a parameter name (lm_head.weight). Unknown names are skipped silently.
#  python/sglang/srt/models/llama.py  LlamaAttention/LlamaMLP: num_attention_heads, num_key_value_heads,
#    head_dim (or hidden/heads), rope_theta, rope_scaling, max_position_embeddings, hidden_act ('silu' only).
#  python/sglang/srt/model_executor/model_runner.py: hf_config.eagle_config["eagle_aux_hidden_state_layer_ids"]
#    -> target.set_eagle3_layers_to_capture(ids), which captures layers [i + 1 for i in ids] (llama.py, qwen3.py)
#    as the stream entering each layer: the file holds canonical - 1.
# ---------------------------------------------------------------------------------------------------------------
def test_sglang_export_every_key_shape_and_field(setup, tmp_path):
    t, c, d, aux, ids = setup
    out = export_sglang(d, tmp_path/'sg')
    cfg = json.loads((out/'config.json').read_text())
    assert cfg['architectures'] == ['LlamaForCausalLMEagle3'] and cfg['model_type'] == 'llama'
    assert cfg['num_hidden_layers'] == 1 and cfg['tie_word_embeddings'] is False and cfg.get('bias', False) is False
    want = dict(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size, num_attention_heads=c.num_attention_heads,
                num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
                rope_theta=c.rope_theta, rope_scaling=None, max_position_embeddings=c.max_position_embeddings,
                hidden_act='silu', vocab_size=t.vocab_size, draft_vocab_size=80, target_hidden_size=t.hidden_size)
    assert {k: cfg[k] for k in want} == want
    assert cfg['eagle_config'] == {'eagle_aux_hidden_state_layer_ids': [i - 1 for i in t.default_aux_layers()],
                                   'use_aux_hidden_state': True}
    # the target captures [i + 1 for i in ids]: the canonical taps
    assert [i + 1 for i in cfg['eagle_config']['eagle_aux_hidden_state_layer_ids']] == t.default_aux_layers()
    # transformers reads the same dims (SGLang builds its config with it)
    from transformers import LlamaConfig
    lc = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ('architectures', 'model_type')})
    assert (lc.head_dim, lc.num_key_value_heads, lc.rope_parameters['rope_theta']) == (c.head_dim, c.num_key_value_heads, c.rope_theta)

    w = tensors(out)
    shapes = expected_shapes(c, 'midlayer')
    assert set(w) == set(shapes), set(w) ^ set(shapes)          # exactly the DESIGN §3 keys, no embed_tokens
    for k, s in shapes.items(): assert tuple(w[k].shape) == s, k
    assert w['d2t'].dtype == torch.int64 and w['t2d'].dtype == torch.bool
    assert all(w[k].dtype == torch.bfloat16 for k in w if k not in ('d2t', 't2d'))
    hot = w['d2t'] + torch.arange(80)                                # SGLang's hot_token_id
    assert hot.tolist() == d.draft_token_ids.tolist() and bool(w['t2d'][hot].all())

    sglang_params = {'model.fc.weight', 'model.midlayer.self_attn.qkv_proj.weight', 'model.midlayer.self_attn.o_proj.weight',
                     'model.midlayer.mlp.gate_up_proj.weight', 'model.midlayer.mlp.down_proj.weight',
                     'model.midlayer.input_layernorm.weight', 'model.midlayer.hidden_norm.weight',
                     'model.midlayer.post_attention_layernorm.weight', 'model.norm.weight', 'lm_head.weight'}
    filled = emulate_stacked_loader(w, lambda n: n if n in sglang_params else f'model.{n}', skip=('d2t', 't2d'))
    assert set(filled) == sglang_params                               # every parameter filled, nothing skipped
    assert sorted(map(str, filled['model.midlayer.self_attn.qkv_proj.weight'])) == ['k', 'q', 'v']
    assert sorted(filled['model.midlayer.mlp.gate_up_proj.weight']) == [0, 1]


# ---------------------------------------------------------------------------------------------------------------
# vLLM speculators format. Read by:
#  vllm/transformers_utils/configs/speculators/base.py  SpeculatorsConfig: speculators_model_type in the supported
#    types; transformer_layer_config (dict) becomes the HF config; speculators_config.proposal_methods[0]
#    .speculative_tokens (-> num_speculative_tokens), speculators_config.verifier.name_or_path must exist.
#  vllm/transformers_utils/configs/speculators/algos.py  update_eagle3: draft_vocab_size, target_hidden_size,
#    norm_before_residual (DEFAULT TRUE when absent), norm_before_fc, fc_norm, norm_output,
#    transformer_layer_config.model_type ('llama' -> Eagle3LlamaForCausalLM), eagle_aux_hidden_state_layer_ids.
#  vllm/model_executor/models/llama_eagle3.py  Eagle3LlamaForCausalLM.load_weights: t2d skipped, d2t ->
#    draft_id_to_target_id (base + d2t = target ids), 'midlayer.' -> 'layers.0.', other names prefixed 'model.'
#    except lm_head; embed_tokens optional (shared with the target when absent); fc input = 3*target_hidden_size.
#  vllm-project/speculators src/speculators/models/eagle3/config.py (Eagle3SpeculatorConfig fields) and
#    convert/eagle/eagle3_converter.py (midlayer.* -> layers.0.*; GreedyTokenProposalConfig; VerifierConfig
#    name_or_path + architectures); model.py DraftVocabMixin: d2t/t2d only when draft_vocab_size != vocab_size.
#  vLLM aux ids are used as given and captured entering layer idx (vllm/model_executor/models/llama.py): canonical.
# ---------------------------------------------------------------------------------------------------------------
def test_speculators_export_every_key_shape_and_field(setup, tmp_path):
    t, c, d, aux, ids = setup
    out = export_speculators(d, tmp_path/'sp', speculative_tokens=4, verifier_name='Qwen/Qwen3-tiny')
    cfg = json.loads((out/'config.json').read_text())
    assert cfg['speculators_model_type'] == 'eagle3' and cfg['architectures'] == ['Eagle3Speculator']
    assert cfg['draft_vocab_size'] == 80 and cfg['target_hidden_size'] == t.hidden_size
    assert cfg['eagle_aux_hidden_state_layer_ids'] == t.default_aux_layers()
    for flag in ('norm_before_residual', 'norm_before_fc', 'fc_norm', 'norm_output'):
        assert flag in cfg and cfg[flag] is False, flag       # explicit: vLLM defaults norm_before_residual to True
    tl = cfg['transformer_layer_config']
    assert isinstance(tl, dict) and tl['model_type'] == 'llama' and tl['num_hidden_layers'] == 1
    want = dict(vocab_size=t.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim,
                rms_norm_eps=c.rms_norm_eps, hidden_act='silu', max_position_embeddings=c.max_position_embeddings,
                tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    assert {k: tl[k] for k in want} == want
    assert tl['rope_parameters'] == {'rope_theta': c.rope_theta, 'rope_type': 'default'} and tl['rope_theta'] == c.rope_theta
    sc = cfg['speculators_config']
    assert sc['algorithm'] == 'eagle3' and sc['default_proposal_method'] == 'greedy'
    assert sc['proposal_methods'][0]['proposal_type'] == 'greedy' and sc['proposal_methods'][0]['speculative_tokens'] == 4
    assert sc['verifier'] == {'name_or_path': 'Qwen/Qwen3-tiny', 'architectures': ['Qwen3ForCausalLM']}
    # what vLLM's SpeculatorsConfig.validate_speculators_config indexes
    _ = (sc['proposal_methods'][0]['speculative_tokens'], sc['verifier']['name_or_path'], cfg['speculators_model_type'])

    w = tensors(out)
    shapes = expected_shapes(c, 'layers.0')
    assert set(w) == set(shapes), set(w) ^ set(shapes)
    for k, s in shapes.items(): assert tuple(w[k].shape) == s, k
    vllm_params = {'model.fc.weight', 'model.layers.0.self_attn.qkv_proj.weight', 'model.layers.0.self_attn.o_proj.weight',
                   'model.layers.0.mlp.gate_up_proj.weight', 'model.layers.0.mlp.down_proj.weight',
                   'model.layers.0.input_layernorm.weight', 'model.layers.0.hidden_norm.weight',
                   'model.layers.0.post_attention_layernorm.weight', 'model.norm.weight', 'lm_head.weight', 'draft_id_to_target_id'}
    def vllm_name(n):
        n = n.replace('midlayer.', 'layers.0.')
        if n == 'd2t': return 'draft_id_to_target_id'
        return n if 'lm_head' in n else f'model.{n}'
    filled = emulate_stacked_loader(w, vllm_name, skip=('t2d',))
    assert set(filled) == vllm_params
    assert (torch.arange(80) + w['d2t']).tolist() == d.draft_token_ids.tolist()   # vLLM compute_logits: base + d2t


def test_aux_id_conventions():
    assert sglang_aux_ids([2, 15, 27]) == [1, 14, 26]          # SmolLM2 taps as SGLang's config holds them
    assert canonical_from_sglang([1, 29, 57]) == [2, 30, 58]   # Kimi-K2 SpecForge numbering -> canonical
    assert canonical_from_sglang(sglang_aux_ids([3, 9, 20])) == [3, 9, 20]


@pytest.mark.parametrize('fmt', ['sglang', 'speculators'])
def test_round_trip_identical_logits(setup, tmp_path, fmt):
    t, c, d, aux, ids = setup
    fn = export_sglang if fmt == 'sglang' else export_speculators
    with torch.no_grad():
        ref = d(aux, ids, steps=3)
        back = load_drafter(fn(d, tmp_path/'f32', dtype='float32'), target=t)
        assert all(torch.equal(a, b) for a, b in zip(back(aux, ids, steps=3), ref))
        assert back.config.aux_layer_ids == c.aux_layer_ids and back.config.target_config_hash == c.target_config_hash
        # bf16 export == the drafter with its weights rounded to bf16
        rounded = Eagle3Drafter(c, t.model.get_input_embeddings().weight).eval()
        rounded.load_state_dict({k: (v.to(torch.bfloat16).float() if v.is_floating_point() else v) for k, v in d.state_dict().items()})
        back16 = load_drafter(fn(d, tmp_path/'bf16'), target=t)
        assert all(torch.equal(a, b) for a, b in zip(back16(aux, ids, steps=3), rounded(aux, ids, steps=3)))


def test_speculators_full_vocab_omits_mapping(tmp_path):
    t = tiny_target('llama')
    c = DrafterConfig.from_target(t, t.vocab_size)
    d = Eagle3Drafter(c, t.model.get_input_embeddings().weight).eval()
    out = export_speculators(d, tmp_path/'sp')
    assert 'd2t' not in tensors(out) and 't2d' not in tensors(out)
    back = load_drafter(out, target=t)
    assert back.draft_token_ids.tolist() == list(range(t.vocab_size))


def test_export_cli_and_errors(setup, tmp_path):
    from eagle_nb.cli import main
    t, c, d, aux, ids = setup
    save_drafter(d, tmp_path/'ckpt')
    assert main(['export', str(tmp_path/'ckpt'), '--to', 'speculators', '--out', str(tmp_path/'sp'), '--verifier', 'x/y']) == 0
    assert json.loads((tmp_path/'sp'/'config.json').read_text())['speculators_config']['verifier']['name_or_path'] == 'x/y'
    assert main(['export', str(tmp_path/'nope'), '--to', 'sglang', '--out', str(tmp_path/'sg')]) == 2
    with pytest.raises(SystemExit): export_main([str(tmp_path/'ckpt'), '--to', 'trt', '--out', str(tmp_path/'x')])
    c4 = DrafterConfig.from_target(t, 80, aux_layer_ids=[1, 2, 3, 4])
    with pytest.raises(EagleNbError, match='exactly 3'): export_sglang(Eagle3Drafter(c4), tmp_path/'x')
    # a drafter for another target is refused
    with pytest.raises(EagleNbError, match='trained for target'): load_drafter(tmp_path/'ckpt', target=tiny_target('llama'))
    # an SGLang config whose layout eagle_nb does not implement is refused, not silently mis-loaded
    sp = tmp_path/'sp'
    cfg = json.loads((sp/'config.json').read_text()); cfg['norm_before_residual'] = True
    (sp/'config.json').write_text(json.dumps(cfg))
    with pytest.raises(EagleNbError, match='norm_before_residual'): load_drafter(sp)
