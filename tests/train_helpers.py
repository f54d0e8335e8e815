"Shared fixtures of the tests/test_train_*.py files: a cached smoke store, the CLI, free ports."
import fcntl, hashlib, json, os, socket, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EAGLE_NB = str(Path(sys.executable).parent/'eagle-nb')
TORCHRUN = str(Path(sys.executable).parent/'torchrun')
# tiny models: one thread each is faster than OpenMP across 2 shared cores, and makes runs comparable
ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'EAGLE_NB_PROGRESS': '0', 'PYTHONUNBUFFERED': '1'}

def _code_hash() -> str:
    h = hashlib.sha256()
    for m in ('train', 'store', 'data', 'extract', 'target'):
        h.update((ROOT/'eagle_nb'/f'{m}.py').read_bytes())
    return h.hexdigest()[:12]

def _smoke_base() -> Path:
    base = Path(tempfile.gettempdir())/f'eagle_nb_test_smoke_{os.getuid()}_{_code_hash()}'
    base.mkdir(parents=True, exist_ok=True)
    return base

def smoke_store(n_samples: int = 48, topk: int = 0) -> str:
    "Path of a smoke store (built once per code version, shared by test files and runs; file-locked)."
    base = _smoke_base()
    path = base/f'store-{n_samples}-top{topk}'
    with open(base/'.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        import torch
        torch.set_num_threads(1)
        from eagle_nb.train import make_smoke_store, smoke_target
        make_smoke_store(path, target=str(smoke_target(base/'target')), n_samples=n_samples, topk=topk)
    return str(path)

def smoke_target_dir() -> str:
    "The smoke stores' tiny trained Llama as an HF directory (`eagle_nb.train.smoke_target`, trained once; file-locked)."
    base = _smoke_base()
    with open(base/'.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        import torch
        torch.set_num_threads(1)
        from eagle_nb.train import smoke_target
        return str(smoke_target(base/'target'))

def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

def train_cli(args: list[str], torchrun: int = 0, timeout: int = 300, **kw) -> subprocess.CompletedProcess:
    "Run `eagle-nb train ARGS` (under torchrun with `torchrun` processes when > 0); raise with the output on failure."
    cmd = [EAGLE_NB, 'train', *args]
    if torchrun: cmd = [TORCHRUN, f'--nproc_per_node={torchrun}', f'--master_port={free_port()}', '--master_addr=127.0.0.1', *cmd]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout, **kw)
    if r.returncode: raise AssertionError(f"{' '.join(cmd)} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
    return r

def load_weights(out) -> dict:
    from safetensors.torch import load_file
    return load_file(str(Path(out)/'model.safetensors'))

def metrics(out) -> list[dict]:
    return [json.loads(l) for l in (Path(out)/'metrics.jsonl').read_text().splitlines() if l.strip()]

def smoke_drafter(draft_vocab: int = 200, seed: int = 0):
    "(store, an untrained Eagle3Drafter over the smoke store's most frequent `draft_vocab` tokens, their ids, t2d, the target's lm_head)."
    import torch
    from eagle_nb.drafter import DrafterConfig, Eagle3Drafter, vocab_map
    from eagle_nb.store import HiddenStateStore
    from eagle_nb.train import draft_vocab_from_store, load_target_heads
    st = HiddenStateStore.open(smoke_store())
    tgt, emb, head_w = load_target_heads(st.manifest['target']['name'])
    ids = draft_vocab_from_store(st, draft_vocab)
    d2t, t2d = vocab_map(ids, tgt.vocab_size)
    torch.manual_seed(seed)
    return st, Eagle3Drafter(DrafterConfig.from_target(tgt, len(ids), st.layer_ids), emb).set_vocab(d2t, t2d), ids, t2d, head_w
