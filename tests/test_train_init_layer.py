"Starting the drafter's layer from a target layer (`--init-layer target:N|target:last`): what is copied, errors, training, resume."
import dataclasses, json
import pytest, torch
from train_helpers import smoke_drafter, smoke_store
from eagle_nb.core import EagleNbError
from eagle_nb.drafter import Eagle3Drafter
from eagle_nb.train import TrainConfig, init_layer_from_target, target_tensors, train

torch.set_num_threads(1)

def test_copies_the_layer_and_the_final_norm():
    "The hidden half of q/k/v, o_proj, the MLP and the norms come from the named layer; the embedding half and fc stay."
    st, dr, ids, t2d, head_w = smoke_drafter()
    name, H = st.manifest['target']['name'], dr.config.hidden_size
    get = target_tensors(name)
    n = sum(1 for i in range(64) if get(f'layers.{i}.input_layernorm.weight') is not None)
    emb_half, fc = dr.midlayer.self_attn.k_proj.weight[:, :H].clone(), dr.fc.weight.clone()
    assert init_layer_from_target(dr, name, 'last') == n - 1
    lay = dr.midlayer
    for p in ('q_proj', 'k_proj', 'v_proj'):
        assert torch.equal(getattr(lay.self_attn, p).weight[:, H:], get(f'layers.{n - 1}.self_attn.{p}.weight').float()), p
    assert torch.equal(lay.self_attn.k_proj.weight[:, :H], emb_half) and torch.equal(dr.fc.weight, fc)
    assert torch.equal(lay.mlp.down_proj.weight, get(f'layers.{n - 1}.mlp.down_proj.weight').float())
    assert torch.equal(lay.hidden_norm.weight, get(f'layers.{n - 1}.input_layernorm.weight').float())
    assert torch.equal(lay.post_attention_layernorm.weight, get(f'layers.{n - 1}.post_attention_layernorm.weight').float())
    assert torch.equal(dr.norm.weight, get('model.norm.weight').float())
    assert init_layer_from_target(dr, name, '0') == 0
    assert torch.equal(lay.mlp.up_proj.weight, get('layers.0.mlp.up_proj.weight').float())
    assert not torch.equal(get('layers.0.mlp.up_proj.weight'), get(f'layers.{n - 1}.mlp.up_proj.weight'))   # the two layers differ
    with pytest.raises(EagleNbError, match=f'outside 0..{n - 1}'): init_layer_from_target(dr, name, str(n))
    wide = Eagle3Drafter(dataclasses.replace(dr.config, intermediate_size=dr.config.intermediate_size + 8))
    with pytest.raises(EagleNbError, match='not shaped like'): init_layer_from_target(wide, name, 'last')

def test_trains_and_resume_keeps_the_choice(tmp_path):
    "A run started from the last layer trains and records it; resuming with another init is refused; bad values are refused."
    kw = dict(store=smoke_store(), ttt_steps=2, batch_tokens=256, max_len=256, compile=False, eval_fraction=0.2, steps=4)
    for bad in ('target', 'target:x', 'layer:3'):
        with pytest.raises(EagleNbError, match='init_layer'): TrainConfig(**kw, out='o', init_layer=bad)
    train(TrainConfig(**kw, out=str(tmp_path/'a'), init_layer='target:last'))
    assert json.loads((tmp_path/'a'/'train_config.json').read_text())['init_layer'] == 'target:last'
    train(TrainConfig(**kw, out=str(tmp_path/'b')))
    from safetensors.torch import load_file
    wa, wb = load_file(str(tmp_path/'a'/'model.safetensors')), load_file(str(tmp_path/'b'/'model.safetensors'))
    norm = next(k for k in wa if k == 'norm.weight' or k.endswith('.norm.weight') and 'layer' not in k)
    assert not torch.equal(wa[norm], wb[norm])                           # started elsewhere, trained the same steps
    with pytest.raises(EagleNbError, match=r"init_layer \('target:last' -> 'random'\)"):
        train(TrainConfig(**{**kw, 'steps': 6}, out=str(tmp_path/'a')))
