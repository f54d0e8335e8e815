"""The client against the REAL SGLang server (sglang 0.5.23, --device cpu, SmolLM2-135M): one aux-capture server and one
final-state server, started once for this module through eagle_nb.engines.EngineServer and stopped by PID.

Real: server info and preflight, the kernel stand-in being installed and never called, prefill rows equal to HF's
hidden states (final and aux), a store that diagnoses as `match` against the HF backend, capture-mode mismatches
refused, and last, the final-state server SIGKILLed mid-extraction and the run resumed against a fresh one. The fake server (tests/fake_sglang.py) still covers what a real one cannot be made to do: 5xx, timeouts, torn bodies."""
import json, os
import pytest
import torch
from sglang_real_helpers import prepare_smollm2_samples, hf_states, rel_err
from eagle_nb.core import EagleNbError
from eagle_nb.sglang import (SGLangClient, SGLangServerSource, server_info, preflight, server_layer_ids,
                             start_extraction_servers, start_sglang_server, sglang_python, install_kernel_stand_in)

pytestmark = pytest.mark.slow
L, H, AUX = 30, 576, [2, 15, 27]


@pytest.fixture(scope='module')
def servers(tmp_path_factory):
    "[aux server, final server], started together once for the module."
    logs = tmp_path_factory.mktemp('sglang-logs')
    srv = start_extraction_servers('smollm2-135m', AUX, logs)
    yield srv
    for s in srv: s.stop()
    assert not any(s.alive() for s in srv)


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    return prepare_smollm2_samples(tmp_path_factory.mktemp('ds')/'ds', n=6)


def test_kernel_stand_in_labelled_and_never_called(servers):
    path = install_kernel_stand_in(sglang_python())
    assert path is not None and '__eagle_nb_stand_in__ = True' in path.read_text()      # no real sgl_kernel here
    # SGLang's own AMX probe answers no with the stand-in, even where the CPU has AMX tiles (this machine: yes)
    import subprocess
    r = subprocess.run([str(sglang_python()), '-c', 'import torch; from sglang.srt.utils.common import cpu_has_amx_support; '
                        'print(torch.cpu._is_amx_tile_supported(), cpu_has_amx_support())'],
                       capture_output=True, text=True, env={**os.environ, 'SGLANG_USE_CPU_ENGINE': '1'})
    assert r.returncode == 0 and r.stdout.split()[-1] == 'False', r.stderr[-500:]
    for s in servers:
        assert server_info(s.url)['attention_backend'] == 'torch_native'
        log = s.log_path.read_text(errors='replace')
        assert 'KernelStandInCalled' not in log and "eagle_nb's import-only stand-in" not in log


def _environ(pid: int) -> dict:
    raw = open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace')
    return dict(kv.split('=', 1) for kv in raw.split('\0') if '=' in kv)

def _pgid(pid: int) -> int|None:
    try: return os.getpgid(pid)
    except OSError: return None

def test_servers_started_together_share_the_cores(servers):
    """Each real server runs with its share of the cores as OMP_NUM_THREADS, which its scheduler inherits. Read from every
    process of the server's group that still shows its environment: the scheduler and detokenizer retitle themselves
    (`sglang::scheduler`), which overwrites what /proc shows of theirs."""
    from eagle_nb.sglang import sglang_cpu_threads
    want = sglang_cpu_threads(2)[0] or os.environ.get('OMP_NUM_THREADS')    # None only where the user set it (inherited)
    for s in servers:
        group = [int(p) for p in os.listdir('/proc') if p.isdigit() and _pgid(int(p)) == s.pid]
        shown = [p for p in group if not open(f'/proc/{p}/cmdline', 'rb').read().startswith(b'sglang::')]
        assert s.pid in shown and len(group) > len(shown), (group, shown)  # the launcher, and retitled children
        assert {_environ(p).get('OMP_NUM_THREADS') for p in shown} == {str(want) if want else None}, (s.name, shown)


def test_preflight_reads_real_server_info(servers):
    aux, final = servers
    info = server_info(final.url)
    assert info['version'] == '0.5.23' and info['device'] == 'cpu' and info['attention_backend'] == 'torch_native'
    assert info['enable_return_hidden_states'] and info['disable_radix_cache'] and info['chunked_prefill_size'] in (-1, None)
    infos = preflight([aux.url, final.url], max_len=96)           # passes: nothing to add
    assert set(infos) == {aux.url, final.url}
    assert server_layer_ids(infos[aux.url], L) == AUX and server_layer_ids(infos[final.url], L) is None


def test_rows_equal_hf_hidden_states(servers, data):
    from eagle_nb.data import TokenizedDataset
    aux, final = servers
    ids = TokenizedDataset.open(data)[0]['input_ids'].tolist()
    got_final = SGLangClient(final.url, width=H).fetch(ids, 's0')          # (T, H) post-norm final state
    got_aux = SGLangClient(aux.url, width=3 * H).fetch(ids, 's0')          # (T, 3H) = HF 2, 15, 27 side by side
    ref = hf_states(ids, AUX + [L])                                         # (T, 4, H)
    assert got_final.shape == (len(ids), H) and got_aux.shape == (len(ids), 3 * H)
    # both sides compute in bf16 with different kernels over 30 layers: a few % relative error (measured 2.9% on the
    # final state of a 96-token sample); the dtype-aware verdict is the diagnostics test below
    errs = [rel_err(got_aux[:, j * H:(j + 1) * H], ref[:, j]) for j in range(3)] + [rel_err(got_final, ref[:, 3])]
    print('relative error vs HF, layers 2/15/27/final:', [round(e, 4) for e in errs])
    assert max(errs) < 0.05, errs
    # and each block is the layer it claims, not a neighbour: the next layer is much further away
    assert rel_err(got_aux[:, :H], ref[:, 0]) < 0.5 * rel_err(got_aux[:, :H], hf_states(ids, [3])[:, 0])


def test_extract_with_urls_matches_hf_backend(servers, data, tmp_path):
    from eagle_nb.cli import extract_main
    from eagle_nb.diagnostics import compare
    from eagle_nb.store import HiddenStateStore, verify_store
    aux, final = servers
    sg, hf = tmp_path/'sglang', tmp_path/'hf'
    assert extract_main(['--backend', 'sglang', '--data', str(data), '--target', 'smollm2-135m', '--url', aux.url,
                         '--final-url', final.url, '--out', str(sg)]) == 0
    assert extract_main(['--backend', 'hf', '--data', str(data), '--target', 'smollm2-135m', '--out', str(hf)]) == 0
    st = HiddenStateStore.open(sg)
    assert st.manifest['complete'] and st.layer_ids == AUX and st.manifest['engine']['name'] == 'sglang'
    assert verify_store(sg).ok
    c = compare(hf, sg)
    assert c.kinds == ['match'], c.verdicts[['kind', 'summary']].to_string()


def test_capture_mode_mismatch_refused(servers, data, tmp_path):
    from eagle_nb.extract import WriteConfig, write_store
    aux, final = servers
    # a final-state server handed in as the aux server, and the aux server as the final one
    for urls, finals, says in (([final.url], [final.url], 'returns the final state'),
                               ([aux.url], [aux.url], 'restart it without --enable-return-aux-hidden-states')):
        src = SGLangServerSource('smollm2-135m', urls, layer_ids=AUX, final_urls=finals)
        with pytest.raises(EagleNbError, match=says):
            write_store(src, data, tmp_path/f'x{len(says)}', WriteConfig(progress=False, verbose=False, probe_samples=0))
        src.close()
    src = SGLangServerSource('smollm2-135m', [aux.url], layer_ids=[3, 15, 27], final_urls=[final.url])
    with pytest.raises(EagleNbError, match='--return-aux-hidden-state-layer-ids 2 14 26'):
        write_store(src, data, tmp_path/'y', WriteConfig(progress=False, verbose=False, probe_samples=0))
    src.close()


class KillAfter(SGLangServerSource):
    "The real source; the server is SIGKILLed once `after` samples came back (a crash mid-extraction)."
    def __init__(self, *a, victim=None, after=2, **kw):
        super().__init__(*a, **kw); self.victim, self.after = victim, after
    def states(self, requests):
        for i, s in enumerate(super().states(requests)):
            yield s
            if i + 1 == self.after: self.victim.kill()


def test_kill_mid_extraction_then_resume(servers, tmp_path):
    """Last in this module: it SIGKILLs the module's final-state server mid-extraction. The run stops with one line; a rerun
    against a fresh server resumes, losing and duplicating nothing."""
    from eagle_nb.extract import WriteConfig, write_store
    from eagle_nb.store import HiddenStateStore, verify_store
    from eagle_nb.data import TokenizedDataset
    data = prepare_smollm2_samples(tmp_path/'ds', n=10)
    ids = TokenizedDataset.open(data).ids
    store = tmp_path/'store'
    cfg = WriteConfig(progress=False, verbose=False, probe_samples=0)
    s1 = servers[1]                                                       # the final-state server
    src = KillAfter('smollm2-135m', [s1.url], layer_ids=None, concurrency=2, backoff=0.2, victim=s1, after=2, servers=[s1])
    with pytest.raises(EagleNbError) as e:
        write_store(src, data, store, cfg)
    src.close()
    msg = str(e.value)
    assert '\n' not in msg and 'stopped answering' in msg and 'rerun the same command to resume' in msg
    st = HiddenStateStore.open(store)
    kept = st.sample_ids
    assert 2 <= len(kept) < len(ids) and not st.manifest['complete']
    before = {k: st.get(k)['final'].clone() for k in kept}
    s2 = start_sglang_server('smollm2-135m', tmp_path/'sglang-2.log')
    src = SGLangServerSource('smollm2-135m', [s2.url], layer_ids=None, servers=[s2])
    try: rep = write_store(src, data, store, cfg)
    finally: src.close()
    assert not s2.alive()
    assert rep.complete and rep.skipped == len(kept) and rep.stored == len(ids) - len(kept) and not rep.failed
    st = HiddenStateStore.open(store)
    assert sorted(st.sample_ids) == sorted(ids) and len(st.sample_ids) == len(set(st.sample_ids))        # nothing lost, nothing twice
    assert verify_store(store).ok
    for k in kept: assert torch.equal(st.get(k)['final'], before[k])                # the first run's samples untouched
    assert all(rel_err(st.get(k)['final'], st.get(k)['aux'][:, 0]) == 0 for k in ids)
