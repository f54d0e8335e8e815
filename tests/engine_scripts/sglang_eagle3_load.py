"""Runs IN THE SGLANG ENGINE VENV (eagle_nb.engines.run_in_engine('sglang', ...)): build SGLang's own
LlamaForCausalLMEagle3 (sglang.srt.models.llama_eagle3) from an eagle_nb SGLang export the way SGLang's layer tests set
up a single process (sglang.test.layer_ut_utils.init_single_process_dist), load the weights with its own load_weights,
record every checkpoint key that reached a parameter and every parameter that was filled, then run step 0 through its
modules (fc, hidden_norm, input_layernorm, qkv_proj, rotary_emb, o_proj, post_attention_layernorm, mlp, norm, lm_head).
The attention core (causal softmax(QK^T)V, GQA) is plain torch here: SGLang's RadixAttention needs a ForwardBatch and a
KV pool that only its scheduler builds. Writes a JSON report and the step-0 logits.
usage: python sglang_eagle3_load.py EXPORT_DIR INPUTS.pt OUT_DIR
"""
import json, os, socket, sys
from pathlib import Path
os.environ.setdefault('SGLANG_USE_CPU_ENGINE', '1')
import torch
import torch.nn.functional as F

export, inputs, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
def init_single_process(port: int):
    "world=1 process group + model-parallel groups, as sglang/test/layer_ut_utils.py init_single_process_dist sets them up\n    (that module imports sglang.test.test_utils, which needs `datasets`; the same SGLang calls are made here directly)."
    for k, v in dict(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK='0', WORLD_SIZE='1', LOCAL_RANK='0').items(): os.environ.setdefault(k, v)
    from sglang.srt.distributed import parallel_state
    from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context
    from sglang.srt.server_args import ServerArgs
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend='gloo')
    reset_context()                                  # sglang/test/test_utils.py publish_build_topology
    publish(ServerArgs(model_path='dummy', tp_size=1, ep_size=1, pp_size=1, device='cpu'), role='test', ranks=SpawnRanks(world_rank=0))
    if parallel_state._WORLD is not None: get_parallel().override_permanently(world_group=parallel_state._WORLD)
    initialize_model_parallel(backend='gloo')

init_single_process(port)
from transformers import AutoConfig
from safetensors.torch import load_file
from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3

config = AutoConfig.from_pretrained(export)
dtype = torch.float32
torch.set_default_dtype(dtype)
model = LlamaForCausalLMEagle3(config).eval()
params = dict(model.named_parameters())
filled, used, current = set(), set(), [None]
def recorder(name, loader):
    def load(param, *a, **kw):
        filled.add(name); used.add(current[0]); return loader(param, *a, **kw)
    return load
from sglang.srt.model_loader.weight_utils import default_weight_loader
for name, p in params.items():
    p.weight_loader = recorder(name, getattr(p, 'weight_loader', default_weight_loader))
ckpt = load_file(export/'model.safetensors')
def weights():
    for k, v in ckpt.items():
        current[0] = k; yield k, v.to(dtype) if v.is_floating_point() else v
model.load_weights(weights())
by_design = {'d2t': 'read into hot_token_id', 't2d': 'skipped by SGLang (its loader ignores t2d)'}
report = dict(checkpoint_keys=sorted(ckpt), skipped=sorted(k for k in ckpt if k not in used and k not in by_design),
              by_design={k: v for k, v in by_design.items() if k in ckpt},
              params=sorted(params), missing=sorted(n for n in params if n not in filled),
              hot_token_id_ok=bool(model.hot_token_id is not None and torch.equal(model.hot_token_id, ckpt['d2t'] + torch.arange(ckpt['d2t'].shape[0]))))

x = torch.load(inputs)
aux, ids, embed = x['aux'].to(dtype), x['input_ids'], x['embed'].to(dtype)   # (T, 3H), (T,), (V, H): the target's embedding is shared
m = model.model; layer = m.layers[0]; attn = layer.self_attn
T = ids.shape[0]
pos = torch.arange(T)
with torch.no_grad():
    h = m.fc(aux)                                               # (T, H)
    residual = h
    x2 = torch.cat([layer.input_layernorm(F.embedding(ids, embed)), layer.hidden_norm(h)], -1)   # (T, 2H)
    qkv, _ = attn.qkv_proj(x2)
    q, k, v = qkv.split([attn.q_size, attn.kv_size, attn.kv_size], -1)
    q, k = attn.rotary_emb(pos, q, k)
    hd = attn.head_dim
    q = q.view(T, -1, hd).transpose(0, 1); k = k.view(T, -1, hd).transpose(0, 1); v = v.view(T, -1, hd).transpose(0, 1)
    o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, enable_gqa=True)[0]   # (heads, T, hd)
    o, _ = attn.o_proj(o.transpose(0, 1).reshape(T, -1))
    y, residual = layer.post_attention_layernorm(o, residual)
    y = layer.mlp(y)
    y, _ = m.norm(y, residual)
    logits = y @ model.lm_head.weight.T                         # (T, draft_V)
torch.save(logits, out/'logits.pt')
(out/'report.json').write_text(json.dumps(report, indent=1))
print(json.dumps({k: v for k, v in report.items() if k not in ('checkpoint_keys', 'params')}))
