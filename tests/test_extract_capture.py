"""capture_hidden_states against HF's output_hidden_states: exact on unpadded batches, and on right-padded batches
the real positions match a masked output_hidden_states run (4 tiny architectures; SmolLM2 when marked slow)."""
import pytest, torch

from eagle_nb.extract import capture_hidden_states, decoder_parts
from eagle_nb.target import tiny_target, load_target


def ragged_batch(V, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.zeros(len(lengths), T, dtype=torch.long); mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(3, V, (n,), generator=g); mask[b, :n] = 1
    return ids, mask


def check(t, lengths, tol):
    ids, mask = ragged_batch(t.vocab_size, lengths)
    layers = t.default_aux_layers()
    aux, final = capture_hidden_states(t, ids, mask, layers)
    with torch.no_grad(): ref = t.model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for b, n in enumerate(lengths):
        for j, k in enumerate(layers):
            torch.testing.assert_close(aux[b, :n, j].float(), ref[k][b, :n].float(), atol=tol, rtol=tol)
        torch.testing.assert_close(final[b, :n].float(), ref[-1][b, :n].float(), atol=tol, rtol=tol)


@pytest.mark.parametrize('arch', ['llama', 'qwen2', 'qwen3', 'deepseek_v3'])
def test_padded_batch_matches_masked_reference(arch):
    check(tiny_target(arch), [17, 5, 11, 1], 1e-5)


def test_hooks_removed_and_model_untouched():
    t = tiny_target('llama')
    _, layers, norm = decoder_parts(t.model)
    capture_hidden_states(t, torch.randint(3, t.vocab_size, (1, 6)))
    assert all(not l._forward_pre_hooks for l in layers) and not norm._forward_hooks


@pytest.mark.slow
def test_smollm2_matches_output_hidden_states():
    t = load_target('smollm2-135m')
    ids, mask = ragged_batch(t.vocab_size, [40, 13])
    aux, final = capture_hidden_states(t, ids[:1])                       # unpadded: bit-exact
    with torch.no_grad(): ref = t.model(ids[:1], output_hidden_states=True).hidden_states
    for j, k in enumerate([2, 15, 27]): assert torch.equal(aux[0, :, j], ref[k][0])
    assert torch.equal(final[0], ref[-1][0])
    check(t, [40, 13], 3e-2)                                               # padded, bf16: kernel rounding only
