"""The speculators export loaded by the real `speculators` package (vllm-project/speculators 0.9.0).

speculators cannot go into the project venv (it declares torchvision/torchaudio, which pull CUDA torch here), so
`tools/upstream.py build` (the Makefile's `upstream` target, part of `make test`) installs it with its dependencies in a
directory of its own under $EAGLE_NB_HOME, which this test puts on sys.path. Without it the test skips, except under
tests/run_all.py (`EAGLE_NB_REQUIRE_UPSTREAM=1`), where a missing build is a failure: `make test` never skips it silently.
Checks: `Eagle3SpeculatorConfig.from_pretrained` parses our config.json; `Eagle3DraftModel(config)` accepts every
weight with no unexpected key; its decoder layer (speculators' own code: norms, residual, rope, attention) gives
the same step-0 logits as eagle_nb.
"""
import importlib.util, os, sys
from pathlib import Path
import pytest
import torch

if importlib.util.find_spec('speculators') is None:
    _spec = importlib.util.spec_from_file_location('_upstream', Path(__file__).resolve().parents[1]/'tools'/'upstream.py')
    _upstream = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(_upstream)
    if _upstream.ready(): sys.path.append(str(_upstream.target_dir()))   # appended: the project venv's packages come first
    elif os.environ.get('EAGLE_NB_REQUIRE_UPSTREAM'):
        raise RuntimeError(f'speculators is not built at {_upstream.target_dir()}: run `python tools/upstream.py build` (make upstream)')
    else: pytest.skip('speculators is not installed: `python tools/upstream.py build` (make upstream)', allow_module_level=True)

from speculators.models.eagle3 import Eagle3SpeculatorConfig, Eagle3DraftModel  # noqa: E402

from safetensors.torch import load_file  # noqa: E402
from eagle_nb.target import tiny_target  # noqa: E402
from eagle_nb.drafter import DrafterConfig, Eagle3Drafter, vocab_map, export_speculators  # noqa: E402


@pytest.mark.parametrize('arch', ['llama', 'qwen3'])
def test_speculators_loads_export_and_matches_logits(arch, tmp_path):
    t = tiny_target(arch, seed=5)
    t.model.save_pretrained(tmp_path/'target'); t.tokenizer.save_pretrained(tmp_path/'target')
    c = DrafterConfig.from_target(t, 72)
    torch.manual_seed(0)
    d = Eagle3Drafter(c, t.model.get_input_embeddings().weight).eval()
    d.set_vocab(*vocab_map(torch.randperm(c.vocab_size, generator=torch.Generator().manual_seed(1))[:72], c.vocab_size))
    out = export_speculators(d, tmp_path/'spec', dtype='float32', verifier_name=str(tmp_path/'target'))

    cfg = Eagle3SpeculatorConfig.from_pretrained(str(out))
    assert cfg.speculators_model_type == 'eagle3' and cfg.draft_vocab_size == 72 and cfg.norm_before_residual is False
    assert cfg.eagle_aux_hidden_state_layer_ids == t.default_aux_layers() and cfg.target_hidden_size == t.hidden_size
    assert cfg.transformer_layer_config.head_dim == c.head_dim and cfg.target_vocab_size == t.vocab_size
    assert cfg.speculators_config.proposal_methods[0].speculative_tokens == 3
    cfg.transformer_layer_config._attn_implementation = 'sdpa'   # flex attention is for GPUs

    model = Eagle3DraftModel(cfg).eval()
    weights = load_file(str(out/'model.safetensors'))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert unexpected == []
    assert set(missing) <= set(Eagle3DraftModel._keys_to_ignore_on_load_missing) | {'verifier_lm_head.weight'}, missing
    with torch.no_grad():
        model.embed_tokens.weight.copy_(t.model.get_input_embeddings().weight)
        g = torch.Generator().manual_seed(2)
        aux = torch.randn(1, 9, 3 * c.hidden_size, generator=g); ids = torch.randint(0, c.vocab_size, (1, 9), generator=g)
        # step 0 with speculators' own modules: fc -> cat(embed, fused) -> first decoder layer -> norm -> lm_head
        pos = torch.arange(9)[None]
        x = torch.cat([model.embed_tokens(ids), model.fc(aux)], dim=-1)
        h = model.layers[0](x, attention_mask=None, position_ids=pos, position_embeddings=model.rotary_emb(x, pos))
        h = h[0] if isinstance(h, tuple) else h
        theirs = model.lm_head(model.norm(h))
        ours = d(aux, ids, steps=1)[0]
    print(f"speculators vs eagle_nb step-0 logits max abs diff: {float((theirs - ours).abs().max()):.2e}, missing={sorted(missing)}")
    assert (theirs - ours).abs().max() < 1e-4, float((theirs - ours).abs().max())
    assert torch.equal(model.d2t, d.d2t) and torch.equal(model.t2d, d.t2d)
    # the check discriminates: speculators' other residual layout (vLLM's default when the flag is absent) differs
    model.layers[0].norm_before_residual = True
    with torch.no_grad():
        h2 = model.layers[0](x, attention_mask=None, position_ids=pos, position_embeddings=model.rotary_emb(x, pos))
        h2 = h2[0] if isinstance(h2, tuple) else h2
    assert (model.lm_head(model.norm(h2)) - ours).abs().max() > 1e-3
