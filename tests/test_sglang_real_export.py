"""SGLang's OWN loader reads eagle_nb's SGLang export: in the SGLang engine venv (sglang 0.5.23), build
sglang.srt.models.llama_eagle3.LlamaForCausalLMEagle3 from the export dir, load it with its load_weights (every
checkpoint key must reach a parameter; every parameter but the shared target embedding must be filled; d2t becomes
hot_token_id), and run step 0 through its modules; the logits must equal eagle_nb's drafter's. The script is
tests/engine_scripts/sglang_eagle3_load.py, run by eagle_nb.engines.run_in_engine."""
import json
from pathlib import Path
import pytest
import torch

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parent/'engine_scripts'/'sglang_eagle3_load.py'


def test_sglang_loads_export_and_matches_step0_logits(tmp_path):
    from eagle_nb.engines import run_in_engine
    from eagle_nb.sglang import sglang_python
    from eagle_nb.target import load_target
    from eagle_nb.drafter import DrafterConfig, Eagle3Drafter, vocab_map, export_sglang
    t = load_target('smollm2-135m', dtype=torch.float32)
    c = DrafterConfig.from_target(t, 2048)                                  # SmolLM2 shapes: H 576, 9/3 heads, rope 1e5
    torch.manual_seed(0)
    emb = t.model.get_input_embeddings().weight.detach()
    d = Eagle3Drafter(c, emb).eval()
    d.set_vocab(*vocab_map(torch.randperm(c.vocab_size, generator=torch.Generator().manual_seed(2))[:2048], c.vocab_size))
    with torch.no_grad():                                                   # weights away from their init (norms != 1)
        for p in d.parameters():
            if p.requires_grad: p.copy_(torch.randn_like(p) * (0.05 if p.dim() > 1 else 0.1) + (0 if p.dim() > 1 else 1))
    g = torch.Generator().manual_seed(3)
    T = 24
    aux = torch.randn(1, T, 3 * c.target_hidden_size, generator=g); ids = torch.randint(0, c.vocab_size, (1, T), generator=g)
    with torch.no_grad(): ref = d(aux, ids, steps=1)[0][0]                  # (T, 2048) step-0 logits
    export_sglang(d, tmp_path/'export', dtype='float32')
    torch.save(dict(aux=aux[0], input_ids=ids[0], embed=emb), tmp_path/'inputs.pt')
    sglang_python()                                                         # the venv, with the kernel stand-in
    run_in_engine('sglang', SCRIPT, [tmp_path/'export', tmp_path/'inputs.pt', tmp_path/'out'], tmp_path/'load.log', timeout=600,
                  env={'SGLANG_USE_CPU_ENGINE': '1'})
    rep = json.loads((tmp_path/'out'/'report.json').read_text())
    assert rep['skipped'] == [], rep['skipped']                             # no checkpoint key silently dropped
    assert rep['missing'] == ['model.embed_tokens.weight'], rep['missing']  # only the target's shared embedding
    assert rep['hot_token_id_ok'] and set(rep['by_design']) == {'d2t', 't2d'}
    got = torch.load(tmp_path/'out'/'logits.pt')[:, :c.draft_vocab_size]   # SGLang pads the lm_head rows
    assert got.shape == ref.shape
    err = float((got - ref).abs().max() / ref.abs().max())
    print(f'SGLang step-0 logits vs eagle_nb: max abs diff / max |logit| = {err:.2e}')
    assert err < 1e-4 and torch.equal(got.argmax(-1), ref.argmax(-1))
