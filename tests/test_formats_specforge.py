"""SpecForge .ckpt files -> store: padding stripped, ids +1, equal to an in-process capture; malformed files name file and field."""
import gzip, io
import pytest
import torch
from eagle_nb.extract import capture_hidden_states
from eagle_nb.formats import import_specforge, write_specforge_file, read_specforge_file, FormatError, import_main
from eagle_nb.store import HiddenStateStore, verify_store
from eagle_nb.target import tiny_target

TGT = tiny_target('deepseek_v3')
L, H = TGT.num_layers, TGT.hidden_size
CANON = [2, L // 2, L - 3]
SPECFORGE = [1, L // 2 - 1, L - 4]


pytestmark = pytest.mark.usefixtures('one_torch_thread')


def batch(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in torch.randint(3, 25, (n,), generator=g):
        ids = torch.randint(1, TGT.vocab_size, (int(t),), generator=g)     # (no real token 0 at the end)
        mask = (torch.arange(int(t)) >= int(t) // 3).long()
        aux, final = capture_hidden_states(TGT, ids[None], layer_ids=CANON)  # (1, T, 3, H), (1, T, H)
        out.append((ids, mask, final[0].bfloat16(), aux[0].flatten(1).bfloat16()))
    return out


def test_padded_batch_gz_and_equal_to_capture(tmp_path):
    data = batch()
    pad_to = max(len(d[0]) for d in data)
    (tmp_path/'rows_0-2000').mkdir()
    for i, (ids, mask, fin, aux) in enumerate(data):
        write_specforge_file(tmp_path/'rows_0-2000'/f'data_{i}.ckpt{".gz" if i % 2 else ""}', ids, mask, fin, aux, pad_to=pad_to)
    rep = import_specforge(tmp_path, tmp_path/'st', TGT, show_progress=False)
    assert rep.ok and rep.imported == 4 and rep.padding_stripped == sum(pad_to - len(d[0]) for d in data), rep.summary()
    st = HiddenStateStore.open(tmp_path/'st')
    assert st.layer_ids == CANON and st.manifest['source_layer_ids'] == SPECFORGE and st.manifest['source_convention'] == 'specforge'
    for i, (ids, mask, fin, aux) in enumerate(data):
        s = st.get(f'data_{i}')
        assert torch.equal(s['input_ids'], ids) and torch.equal(s['loss_mask'], mask.to(torch.uint8))
        a, f = capture_hidden_states(TGT, ids[None], layer_ids=CANON)
        assert torch.equal(s['aux'], a[0].bfloat16().float()) and torch.equal(s['final'], f[0].bfloat16().float())
    assert verify_store(tmp_path/'st').ok


def test_states_only_for_real_tokens(tmp_path):
    # a backend that computed states for the real tokens only, while input_ids/loss_mask kept the batch padding
    ids, mask, fin, aux = batch(1, seed=1)[0]
    T = len(ids)
    d = dict(input_ids=torch.cat([ids, torch.zeros(5, dtype=torch.long)]), loss_mask=torch.cat([mask, torch.zeros(5, dtype=torch.long)]),
             hidden_state=fin[None], aux_hidden_state=aux[None])
    torch.save(d, tmp_path/'data_0.ckpt')
    out, stripped = read_specforge_file(tmp_path/'data_0.ckpt', H)
    assert stripped == 5 and out['aux'].shape == (T, 3 * H)
    out, stripped = read_specforge_file(tmp_path/'data_0.ckpt', H, strip_padding=True)
    with pytest.raises(FormatError, match='hidden_state: %d rows for %d input_ids' % (T, T + 5)):
        read_specforge_file(tmp_path/'data_0.ckpt', H, strip_padding=False)


def test_malformed_files_name_file_and_field(tmp_path):
    ids, mask, fin, aux = batch(1, seed=2)[0]
    T = len(ids)
    good = dict(input_ids=ids, loss_mask=mask, hidden_state=fin[None], aux_hidden_state=aux[None])
    cases = {
        'no_aux': ({**good, 'aux_hidden_state': None}, 'aux_hidden_state: missing (SpecForge ran without --enable-aux-hidden-states)'),
        'no_final': ({k: v for k, v in good.items() if k != 'hidden_state'}, 'hidden_state: missing'),
        'mask_len': ({**good, 'loss_mask': mask[1:]}, f'loss_mask: {T - 1} entries for {T} input_ids'),
        'mask_vals': ({**good, 'loss_mask': mask * 2}, 'loss_mask: values other than 0 and 1'),
        'aux_width': ({**good, 'aux_hidden_state': aux[None, :, :2 * H]}, f'aux_hidden_state: width {2 * H}, want 3 x {H}'),
        'wrong_model': ({**good, 'hidden_state': torch.zeros(1, T, H + 8)}, f"hidden_state: width {H + 8}, the target's hidden size is {H}"),
        'nan': ({**good, 'hidden_state': torch.where(torch.arange(T)[None, :, None] == 1, float('nan'), fin[None].float())},
                'hidden_state: 1 tokens with NaN/inf (first at token 1)'),
        'padding_only': ({'input_ids': torch.zeros(4, dtype=torch.long), 'loss_mask': torch.zeros(4, dtype=torch.long),
                          'hidden_state': torch.zeros(1, 4, H), 'aux_hidden_state': torch.zeros(1, 4, 3 * H)}, 'input_ids: only padding'),
        'a_list': ([ids], 'holds a list, SpecForge files hold a dict'),
    }
    for name, (obj, msg) in cases.items():
        torch.save(obj, tmp_path/f'{name}.ckpt')
        with pytest.raises(FormatError) as e: read_specforge_file(tmp_path/f'{name}.ckpt', H)
        assert str(e.value).startswith(str(tmp_path/f'{name}.ckpt')) and msg in str(e.value), str(e.value)
    class Evil:                                                            # weights_only=True refuses arbitrary objects
        def __reduce__(self): return (print, ('executed!',))
    torch.save({'input_ids': ids, 'x': Evil()}, tmp_path/'evil.ckpt')
    with pytest.raises(FormatError, match=r'evil.ckpt: cannot be loaded with torch.load\(weights_only=True\)'):
        read_specforge_file(tmp_path/'evil.ckpt')
    (tmp_path/'broken.ckpt.gz').write_bytes(gzip.compress(bytes(range(256)) * 40)[:100])
    with pytest.raises(FormatError, match='broken.ckpt.gz: gzip stream is broken'): read_specforge_file(tmp_path/'broken.ckpt.gz')
    torch.save(good, tmp_path/'good.ckpt')
    rep = import_specforge(tmp_path, tmp_path/'st', TGT, on_error='skip', show_progress=False)
    assert rep.imported == 1 and len(rep.errors) == len(cases) + 2 and not rep.ok
    st = HiddenStateStore.open(tmp_path/'st')
    assert st.sample_ids == ['good'] and not st.manifest['complete']
    with pytest.raises(FormatError, match='a_list.ckpt'): import_specforge(tmp_path, tmp_path/'st2', TGT, show_progress=False)


def test_cli_custom_ids(tmp_path, capsys):
    ids, mask, fin, aux = batch(1, seed=3)[0]
    write_specforge_file(tmp_path/'data_0.ckpt', ids, mask, fin, aux)
    assert import_main(['--from', 'specforge', str(tmp_path), '--out', str(tmp_path/'st'), '--target', 'tiny-deepseek_v3',
                        '--layers', ','.join(map(str, SPECFORGE))]) == 0
    assert HiddenStateStore.open(tmp_path/'st').layer_ids == CANON
    assert 'canonical [2, 4, 5]' in capsys.readouterr().out
