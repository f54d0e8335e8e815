"""`eagle-nb diagnose` on real stores: the store adapter, JSON output, exit codes, and no false alarm on bf16 stores."""
import json, pytest, torch
from eagle_nb.target import tiny_target
from eagle_nb.diagnostics import Extraction, capture_states, demo_samples, default_taps, diagnose_main, save_store, compare
from eagle_nb.emulators import engine_extraction, drop_prefix_rows
from eagle_nb.cli import main as cli_main

pytestmark = pytest.mark.usefixtures('one_torch_thread')


@pytest.fixture(scope='module')
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp('stores')
    t = tiny_target('llama', seed=55)
    s = demo_samples(t, 5, 40, 120, seed=21)
    taps = default_taps(t.num_layers)
    out = dict(
        ref=save_store(capture_states(t, s), d/'ref', t),                                   # all layers 0..L
        bf16=save_store(capture_states(t, s, taps, dtype=torch.bfloat16, batch_size=2), d/'bf16', t),
        vllm=save_store(engine_extraction(t, s, 'vllm', [i - 1 for i in taps], believed='specforge'), d/'vllm', t),
        radix=save_store(drop_prefix_rows(capture_states(t, s, taps), 6), d/'radix', t),
    )
    return t, taps, out

def test_store_adapter_reads_lazily(stores):
    t, taps, st = stores
    e = Extraction.from_store(st['vllm'])
    assert e.hf_layer_ids == taps and e.layer_ids == taps and e.convention == 'hf'
    assert e.meta['source_convention'] == 'specforge' and e.meta['storage_dtype'] == 'bfloat16'
    sid = e.ids[0]
    x = e.samples[sid]
    assert set(x['layers']) == set(taps) and x['final'].shape == x['layers'][taps[0]].shape

def test_diagnose_json_and_exit_codes(stores, capsys):
    t, taps, st = stores
    assert diagnose_main([str(st['ref']), str(st['bf16'])]) == 0        # bf16 compute + bf16 stores: no false alarm
    capsys.readouterr()
    rc = diagnose_main([str(st['ref']), str(st['vllm']), '--json'])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and not out['usable']
    assert set(out['kinds']) == {'layer_offset', 'norm_mismatch'}
    v = {x['kind']: x for x in out['verdicts']}
    assert v['layer_offset']['evidence']['held'] == [i - 1 for i in taps] and v['layer_offset']['fix']
    assert all(k in out['layers'][0] for k in ('cos', 'rel_err', 'norm_ratio', 'worst_tokens', 'envelope'))
    assert len(out['cross']['rel_err']) == t.num_layers + 2          # A: ids 0..L + final
    rc = diagnose_main([str(st['ref']), str(st['radix']), '--json'])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and out['kinds'] == ['missing_tokens']
    assert out['verdicts'][0]['evidence']['rows_missing_max'] == 6

def test_diagnose_expect_layers_and_plots(stores, tmp_path, capsys):
    t, taps, st = stores
    # B's labels say SpecForge ids converted to HF taps; --expect-layers states what serving feeds explicitly
    assert diagnose_main([str(st['ref']), str(st['bf16']), '--expect-layers', ','.join(map(str, taps)), '--plots', str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {'layer_curves.png', 'cross_layer.png', 'tokens.png'}
    capsys.readouterr()
    assert diagnose_main([str(st['ref']), str(st['bf16']), '--expect-layers', ','.join(str(i + 1) for i in taps)]) == 1
    assert 'layer_offset' in capsys.readouterr().out

def test_cli_errors_are_one_line(stores, tmp_path, capsys):
    t, taps, st = stores
    assert cli_main(['diagnose', str(tmp_path/'nope'), str(st['bf16'])]) == 2
    assert 'not a hidden-state store' in capsys.readouterr().err
    assert cli_main(['diagnose', str(st['ref']), str(st['bf16']), '--expect-layers', 'a,b']) == 2

def test_capture_matches_extract(stores):
    "The diagnostics' hooks and eagle_nb.extract.capture_hidden_states see the same tensors."
    from eagle_nb.extract import capture_hidden_states
    t = tiny_target('deepseek_v3', seed=56)
    s = demo_samples(t, 2, 30, 60, seed=3)
    ids = list(default_taps(t.num_layers)) + [t.num_layers]
    mine = capture_states(t, s, ids)
    for sid, toks in s.items():
        aux, final = capture_hidden_states(t, torch.tensor([toks]), None, ids)
        for j, k in enumerate(ids): torch.testing.assert_close(mine.samples[sid]['layers'][k], aux[0, :, j].float())
        torch.testing.assert_close(mine.samples[sid]['final'], final[0].float())

def test_vllm_files_through_the_importer(stores, tmp_path, capsys):
    "Emulated vLLM extract_hidden_states files -> eagle_nb.formats.import_vllm -> diagnose against the reference store."
    from eagle_nb.formats import write_vllm_file, import_vllm
    t, taps, st = stores
    L = t.num_layers
    ref = Extraction.from_store(st['ref'])
    s = {sid: ref.samples[sid]['input_ids'].tolist() for sid in ref.ids}
    cfg = [i - 1 for i in taps] + [L]                      # a SpecForge config's taps handed to vLLM, plus id L
    v = engine_extraction(t, s, 'vllm', cfg)
    (tmp_path/'vllm').mkdir()
    for sid, x in v.samples.items():   # one file per request: token_ids [T], hidden_states [T, n, H]
        write_vllm_file(tmp_path/'vllm'/f'{sid}.safetensors', x['input_ids'], torch.stack([x['layers'][k] for k in cfg], 1))
    import_vllm(tmp_path/'vllm', tmp_path/'applied', t, cfg, final_norm='apply', show_progress=False)
    import_vllm(tmp_path/'vllm', tmp_path/'pre', t, cfg, final_norm='pre', show_progress=False)
    # the importer labels honestly (vLLM ids = HF ids): the data match the labels, but not the default taps
    assert diagnose_main([str(st['ref']), str(tmp_path/'applied')]) == 0
    assert 'not the EAGLE-3 defaults' in capsys.readouterr().out
    rc = diagnose_main([str(st['ref']), str(tmp_path/'applied'), '--json', '--expect-layers', ','.join(map(str, taps))])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and out['kinds'] == ['layer_offset'] and out['verdicts'][0]['evidence']['offsets'] == [-1]
    rc = diagnose_main([str(st['ref']), str(tmp_path/'pre'), '--json'])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and out['kinds'] == ['norm_mismatch'] and "final_norm = 'pre'" in out['verdicts'][0]['summary']
