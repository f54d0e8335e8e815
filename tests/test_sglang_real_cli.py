"""`eagle-nb extract --backend sglang` WITHOUT --url on the REAL engine: it starts its own local SGLang servers (aux
capture + final state, sglang 0.5.23 --device cpu from the engine venv), logs them next to the store, stops them by
PID, and the SmolLM2 store it writes diagnoses as `match` against the HF backend's store of the same samples."""
import os
import pytest

pytestmark = pytest.mark.slow


def test_extract_starts_and_stops_its_own_servers(sglang_cli_store, tmp_path):
    # the run itself is conftest.py's sglang_cli_store (extract_main without --url), shared with test_sglang_real_vs_vllm
    from eagle_nb.cli import extract_main
    from eagle_nb.diagnostics import compare
    from eagle_nb.store import HiddenStateStore
    from eagle_nb.sglang import sglang_cpu_threads
    data, sg, hf = sglang_cli_store/'ds', sglang_cli_store/'sglang', tmp_path/'hf'
    assert extract_main(['--backend', 'hf', '--data', str(data), '--target', 'smollm2-135m', '--out', str(hf)]) == 0
    logs = sglang_cli_store/'sglang.sglang-logs'
    assert sorted(p.name for p in logs.glob('*.log')) == ['sglang-aux.log', 'sglang-final.log']
    for pid_file in logs.glob('*.pid'):                                    # stopped: the PIDs are gone
        pid = int(pid_file.read_text())
        with pytest.raises(ProcessLookupError): os.kill(pid, 0)
    st = HiddenStateStore.open(sg)
    started = st.manifest['engine']['started_by_eagle_nb']
    assert len(started) == 2 and all('--host' in s['argv'] and '127.0.0.1' in s['argv'] for s in started)
    want = sglang_cpu_threads(2)[0]                                        # each its share of the cores, in the store's record
    assert [s['env'].get('OMP_NUM_THREADS') for s in started] == [str(want) if want else None] * 2
    c = compare(hf, sg)
    assert c.kinds == ['match'], c.verdicts[['kind', 'summary']].to_string()
