"""vLLM extract_hidden_states files -> store: equal to an in-process capture after the id mapping; malformed files name file and field."""
import json
import pytest
import torch
from eagle_nb.core import EagleNbError
from eagle_nb.extract import capture_hidden_states, decoder_parts
from eagle_nb.formats import import_vllm, write_vllm_file, read_vllm_file, FormatError, import_main
from eagle_nb.store import HiddenStateStore, verify_store
from eagle_nb.target import tiny_target

TGT = tiny_target('qwen3')
L, H = TGT.num_layers, TGT.hidden_size
VLLM_IDS = [2, L // 2, L - 3, L]


pytestmark = pytest.mark.usefixtures('one_torch_thread')


def prompts(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, TGT.vocab_size, (int(t),), generator=g) for t in torch.randint(3, 30, (n,), generator=g)]


def vllm_states(ids, ks=VLLM_IDS):
    "What vLLM captures: HF hidden_states[k] for k < L (hidden_states + residual entering layer k), id L before the norm."
    with torch.no_grad(): hs = TGT.model(ids[None], output_hidden_states=True).hidden_states
    pre = {}
    h = decoder_parts(TGT.model)[1][-1].register_forward_hook(lambda m, i, o: pre.setdefault('x', o[0] if isinstance(o, tuple) else o))
    with torch.no_grad(): TGT.model(ids[None])
    h.remove()
    return torch.stack([pre['x'][0] if k == L else hs[k][0] for k in ks], 1)     # (T, n, H)


def write_all(d, ps, layout='TnH', dtype=torch.float32):
    for i, ids in enumerate(ps): write_vllm_file(d/f'req-{i}.safetensors', ids, vllm_states(ids).to(dtype), layout)


@pytest.mark.parametrize('layout', ['TnH', 'nTH'])
def test_import_equals_capture(tmp_path, layout):
    ps = prompts()
    write_all(tmp_path, ps, layout)
    rep = import_vllm(tmp_path, tmp_path/'st', TGT, VLLM_IDS, show_progress=False)
    assert rep.ok and rep.imported == 3, rep.summary()
    st = HiddenStateStore.open(tmp_path/'st')
    assert st.layer_ids == [2, L // 2, L - 3] and st.manifest['source_layer_ids'] == VLLM_IDS
    assert st.manifest['source_convention'] == 'vllm' and st.manifest['engine']['final_norm'] == 'applied'
    for i, ids in enumerate(ps):
        aux, final = capture_hidden_states(TGT, ids[None], layer_ids=[2, L // 2, L - 3])
        s = st.get(f'req-{i}')
        assert torch.equal(s['input_ids'], ids)
        assert torch.equal(s['aux'], aux[0].bfloat16().float())                 # exact after bf16 storage
        assert torch.equal(s['final'], final[0].bfloat16().float())             # the final norm applied to vLLM's id L
    assert verify_store(tmp_path/'st').ok and st.manifest['complete']


def test_bf16_files_prenorm_option_dataset_masks_and_resume(tmp_path):
    ps = prompts(seed=1)
    write_all(tmp_path, ps, dtype=torch.bfloat16)
    data = [dict(id=f'conv-{i}', input_ids=ids, loss_mask=(torch.arange(len(ids)) % 2).to(torch.uint8)) for i, ids in enumerate(ps)]
    rep = import_vllm(tmp_path, tmp_path/'st', TGT.describe(), VLLM_IDS, dataset=data, final_norm='pre', show_progress=False)
    st = HiddenStateStore.open(tmp_path/'st')
    assert rep.ok and sorted(st.sample_ids) == ['conv-0', 'conv-1', 'conv-2'] and st.manifest['engine']['final_norm'] == 'pre'
    s = st.get('conv-1')
    assert torch.equal(s['loss_mask'], data[1]['loss_mask'])
    assert torch.equal(s['final'], vllm_states(ps[1])[:, -1].bfloat16().float())   # kept pre-norm, as recorded
    rep2 = import_vllm(tmp_path, tmp_path/'st', TGT.describe(), VLLM_IDS, dataset=data, final_norm='pre', show_progress=False)
    assert (rep2.imported, rep2.already) == (0, 3)
    with pytest.raises(EagleNbError, match="final_norm='pre'"):            # no weights: refuse to call pre-norm "final" silently
        import_vllm(tmp_path, tmp_path/'s2', TGT.describe(), VLLM_IDS, show_progress=False)
    with pytest.raises(EagleNbError, match='lack 8'):
        import_vllm(tmp_path, tmp_path/'s3', TGT, [2, 4, 5, 6], show_progress=False)


def test_malformed_files_name_file_and_field(tmp_path):
    from safetensors.torch import save_file
    ids = prompts(1)[0]; T = len(ids)
    hs = vllm_states(ids)
    cases = {
        'no_tokens.safetensors': ({'hidden_states': hs}, 'token_ids: missing'),
        'flat.safetensors': ({'token_ids': ids, 'hidden_states': hs[:, 0]}, 'hidden_states: want [T, n_layers, H]'),
        'short.safetensors': ({'token_ids': ids, 'hidden_states': hs[1:].contiguous()}, 'hidden_states: %d rows for %d token_ids' % (T - 1, T)),
        'wide.safetensors': ({'token_ids': ids, 'hidden_states': torch.cat([hs, hs], -1)}, "hidden_states: width %d, the target's hidden size is %d" % (2 * H, H)),
        'layers.safetensors': ({'token_ids': ids, 'hidden_states': hs[:, :3].contiguous()}, 'hidden_states: holds 3 layers, --layers names 4'),
        'nan.safetensors': ({'token_ids': ids, 'hidden_states': torch.where(torch.arange(T)[:, None, None] == 2, float('nan'), hs)},
                            'hidden_states: 1 tokens with NaN/inf (first at token 2)'),
    }
    for name, (tensors, msg) in cases.items():
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp_path/name))
        with pytest.raises(FormatError) as e: read_vllm_file(tmp_path/name, 4, H)
        assert str(e.value).startswith(str(tmp_path/name)) and msg in str(e.value), str(e.value)
    (tmp_path/'junk.safetensors').write_bytes(b'\x00' * 40)
    with pytest.raises(FormatError, match='junk.safetensors: not a readable safetensors file'): read_vllm_file(tmp_path/'junk.safetensors')
    with pytest.raises(FormatError, match=r'zstd -d'): read_vllm_file(tmp_path/'x.safetensors.zst')
    # on_error='skip': the bad files are listed, nothing from them stored
    write_vllm_file(tmp_path/'good.safetensors', ids, hs)
    rep = import_vllm(tmp_path, tmp_path/'st', TGT, VLLM_IDS, on_error='skip', show_progress=False)
    assert rep.imported == 1 and len(rep.errors) == len(cases) + 1 and HiddenStateStore.open(tmp_path/'st').sample_ids == ['good']


def test_cli(tmp_path, capsys):
    write_all(tmp_path/'in' if (tmp_path/'in').mkdir() is None else None, prompts(2))
    assert import_main(['--from', 'vllm', str(tmp_path/'in'), '--out', str(tmp_path/'st'), '--target', 'tiny-qwen3',
                        '--layers', ','.join(map(str, VLLM_IDS)), '--json']) == 0
    out = json.loads(capsys.readouterr().out)
    assert out['ok'] and out['imported'] == 2 and out['format'] == 'vllm'
