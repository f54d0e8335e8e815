"""extract on a real `eagle-nb prepare` dataset: the dataset's draft vocab drives the top-k teacher (hash as the
trainer checks it), the preflight reports the length policy's cuts, a dataset tokenized for another chat template
is refused, and the stored top-k equals a brute-force log-softmax."""
import json
from pathlib import Path
import pytest, torch

from eagle_nb.core import EagleNbError
from eagle_nb.data import TokenizedDataset, prepare_dataset
from eagle_nb.extract import ExtractConfig, extract, preflight
from eagle_nb.store import verify_store
from eagle_nb.target import tiny_target

WORDS = 'the quick brown fox jumps over lazy dog hello world paris is capital of france print return add'.split()


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
    d = tmp_path_factory.mktemp('ds')
    g = torch.Generator().manual_seed(0)
    say = lambda n: ' '.join(WORDS[int(i)] for i in torch.randint(len(WORDS), (n,), generator=g))
    with open(d/'conv.jsonl', 'w') as f:
        for i in range(24):
            f.write(json.dumps(dict(id=f'c{i}', messages=[dict(role='user', content=say(5 + i)), dict(role='assistant', content=say(10 + 3 * i))])) + '\n')
    t = tiny_target('llama')
    prepare_dataset(d/'conv.jsonl', t, d/'data', max_len=120, policy='truncate', draft_vocab_size=64)
    return t, d/'data'


def test_topk_from_dataset_vocab(prepared, tmp_path):
    t, data = prepared
    st = extract(str(data), t, tmp_path/'s', ExtractConfig(signal='topk', topk=5, probe_batches=1, progress=False), verbose=False)
    ds = TokenizedDataset.open(data)
    dv = ds.draft_vocab()
    from eagle_nb.train import vocab_sha256
    assert st.manifest['draft_vocab']['sha256'] == vocab_sha256(dv.token_ids) and st.manifest['draft_vocab']['size'] == 64
    assert st.dataset['path'] == str(Path(data).resolve()) and st.dataset['draft_vocab_sha256'] == dv.sha256 == vocab_sha256(dv.token_ids)
    assert verify_store(st.path).ok and not st.manifest['store_final']
    x = st.get(ds.ids[3])
    with torch.no_grad():
        logp = torch.log_softmax(t.model(x['input_ids'][None]).logits[0].float(), -1)    # (T, V)
    want = logp[:, dv.token_ids].topk(5)
    assert torch.equal(x['topk_ids'], want.indices)
    assert torch.allclose(x['topk_logprobs'], want.values, atol=2e-3)                      # fp16 storage
    assert torch.equal(x['target_argmax'], logp.argmax(-1))


def test_preflight_reports_length_policy(prepared, tmp_path):
    t, data = prepared
    df = preflight(str(data), t, tmp_path/'s', ExtractConfig(probe_batches=0), verbose=False)
    assert df.loc['length policy', 'value'] == 'truncate at 120'
    assert 'samples over max_len' in df.loc['length policy', 'detail']


def test_refuses_other_template(prepared, tmp_path):
    _, data = prepared
    with pytest.raises(EagleNbError, match='chat template differs'):
        extract(str(data), tiny_target('qwen2'), tmp_path/'s', ExtractConfig(probe_batches=0), verbose=False)


def test_lineage_store_checkpoint_dataset(prepared, tmp_path):
    "Typed lineage: store -> dataset (path, sha256, draft-vocab sha256) -> checkpoint -> store, no guesses from `extra`."
    from eagle_nb.train import resolve_draft_vocab, store_lineage, TrainConfig
    from eagle_nb.eval import checkpoint_dataset
    from eagle_nb.drafter import save_drafter
    from eagle_nb.eval import random_init_drafter
    from eagle_nb.core import EagleNbError
    t, data = prepared
    st = extract(str(data), t, tmp_path/'s', ExtractConfig(probe_batches=0, progress=False), verbose=False)
    ds = TokenizedDataset.open(data)
    assert st.dataset['sha256'] and st.dataset['samples'] == len(ds.ids)
    ids, where = resolve_draft_vocab(TrainConfig(store=str(st.path), out=str(tmp_path/'ck')), st)
    assert where == f"dataset {Path(data).resolve()}" and torch.equal(ids, ds.draft_vocab().token_ids)
    lin = store_lineage(st.path)
    assert lin['dataset'] == st.dataset and lin['samples'] == len(st)
    save_drafter(random_init_drafter(t, 64), tmp_path/'ck', lineage=lin)
    assert checkpoint_dataset(tmp_path/'ck') == str(Path(data).resolve())
    # the dataset's draft vocab changed after extraction: training refuses it by hash
    st2 = extract(str(data), t, tmp_path/'s2', ExtractConfig(probe_batches=0, progress=False), verbose=False)
    import json as _j
    m = _j.loads((st2.path/'manifest.json').read_text()); m['dataset']['draft_vocab_sha256'] = '0' * 64
    (st2.path/'manifest.json').write_text(_j.dumps(m))
    from eagle_nb.store import HiddenStateStore
    with pytest.raises(EagleNbError, match='draft vocab'):
        resolve_draft_vocab(TrainConfig(store=str(st2.path), out=str(tmp_path/'ck2')), HiddenStateStore.open(st2.path))
    # resuming a store from another dataset is refused
    other = tmp_path/'other.jsonl'
    other.write_text('\n'.join(_j.dumps(dict(id=ds.ids[i], input_ids=ds[i]['input_ids'].tolist(), loss_mask=ds[i]['loss_mask'].tolist())) for i in range(3)) + '\n')
    with pytest.raises(EagleNbError, match='cannot resume'):
        extract(str(other), t, tmp_path/'s', ExtractConfig(probe_batches=0, progress=False), verbose=False)
