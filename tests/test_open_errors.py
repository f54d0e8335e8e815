"""Bad input to the commands ends in one line that names the file and what is wrong, never a traceback: a target
directory without a tokenizer (an import needs none) or with only a config.json, a store with a truncated shard,
a checkpoint whose weights file is truncated (export and eval)."""
import pytest, torch

from eagle_nb.cli import main
from eagle_nb.drafter import DrafterConfig, Eagle3Drafter, vocab_map, save_drafter
from eagle_nb.formats import write_vllm_file, import_vllm
from eagle_nb.store import HiddenStateStore
from eagle_nb.target import tiny_target

pytestmark = pytest.mark.usefixtures('one_torch_thread')
TGT = tiny_target('qwen3')
L = TGT.num_layers
VLLM_IDS = [2, L // 2, L - 3, L]


def one_line_error(capsys, argv, *words):
    "Run the CLI, expect exit 2 with one stderr line containing every word."
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'Traceback' not in err, err
    for w in words: assert w in err, (w, err)
    return err


@pytest.fixture
def vllm_files(tmp_path):
    g = torch.Generator().manual_seed(0)
    d = tmp_path/'vllm'; d.mkdir()
    for i in range(2):
        T = 5 + i
        write_vllm_file(d/f'req-{i}.safetensors', torch.randint(0, TGT.vocab_size, (T,), generator=g),
                        torch.randn(T, len(VLLM_IDS), TGT.hidden_size, generator=g), 'TnH')
    return d


def test_import_vllm_target_without_tokenizer_works(tmp_path, vllm_files, capsys):
    tdir = tmp_path/'target'; TGT.model.save_pretrained(tdir)          # config + weights, no tokenizer, no chat template
    assert not list(tdir.glob('tokenizer*'))
    argv = ['import', '--from', 'vllm', str(vllm_files), '--out', str(tmp_path/'st'), '--target', str(tdir), '--layers', ','.join(map(str, VLLM_IDS))]
    assert main(argv) == 0, capsys.readouterr().err
    ref = import_vllm(vllm_files, tmp_path/'ref', TGT, VLLM_IDS, show_progress=False)   # the in-memory target: same states
    a, b = HiddenStateStore.open(tmp_path/'st'), HiddenStateStore.open(tmp_path/'ref')
    assert ref.ok and a.sample_ids == b.sample_ids and len(a) == 2
    assert a.manifest['engine']['final_norm'] == 'applied'
    for sid in a.sample_ids:   # the loaded target may compute the norm in bf16 (fast_dtype), the reference in fp32
        assert torch.allclose(a.get(sid)['final'], b.get(sid)['final'], rtol=2e-2, atol=2e-2)


def test_import_vllm_target_with_only_a_config(tmp_path, vllm_files, capsys):
    tdir = tmp_path/'target'; TGT.model.config.save_pretrained(tdir)
    argv = ['import', '--from', 'vllm', str(vllm_files), '--out', str(tmp_path/'st'), '--target', str(tdir), '--layers', ','.join(map(str, VLLM_IDS))]
    one_line_error(capsys, argv, str(tdir), 'no weights', '--final-norm pre')
    assert main(argv + ['--final-norm', 'pre']) == 0, capsys.readouterr().err   # a pre-norm import needs the config only


def test_train_on_a_truncated_shard(tmp_path, capsys):
    t = tiny_target('llama')
    with HiddenStateStore.create(tmp_path/'st', target=t.describe(), layer_ids=t.default_aux_layers(), engine=dict(name='test'), shard_bytes=1) as s:
        for i in range(3):
            T = 12
            s.add(f's{i}', torch.randint(0, t.vocab_size, (T,)), torch.ones(T), torch.randn(T, 3, t.hidden_size), torch.randn(T, t.hidden_size))
    f = tmp_path/'st'/'shard-00001.safetensors'; f.write_bytes(f.read_bytes()[:-100])
    one_line_error(capsys, ['train', '--store', str(tmp_path/'st'), '--out', str(tmp_path/'out'), '--steps', '1', '--device', 'cpu'],
                   str(f), 'truncated or damaged shard')


@pytest.fixture
def truncated_checkpoint(tmp_path):
    t = tiny_target('llama')
    c = DrafterConfig.from_target(t, 40)
    d = Eagle3Drafter(c, t.model.get_input_embeddings().weight)
    d.set_vocab(*vocab_map(torch.arange(40) * 2, c.vocab_size))
    ck = save_drafter(d, tmp_path/'ckpt')
    w = ck/'model.safetensors'; w.write_bytes(w.read_bytes()[:-1000])
    return ck


def test_export_of_a_truncated_checkpoint(tmp_path, truncated_checkpoint, capsys):
    one_line_error(capsys, ['export', str(truncated_checkpoint), '--to', 'sglang', '--out', str(tmp_path/'exp')],
                   str(truncated_checkpoint/'model.safetensors'), 'truncated or damaged drafter weights')
    assert not (tmp_path/'exp').exists()


def test_eval_of_a_truncated_checkpoint(tmp_path, truncated_checkpoint, capsys):
    prompts = tmp_path/'p.jsonl'; prompts.write_text('{"id": "a", "prompt": "hello"}\n')
    one_line_error(capsys, ['eval', '--target', 'tiny-llama', '--drafter', str(truncated_checkpoint), '--prompts', str(prompts),
                            '--limit', '1', '--max-new-tokens', '4', '--device', 'cpu', '--out', str(tmp_path/'e.json')],
                   str(truncated_checkpoint/'model.safetensors'), 'truncated or damaged drafter weights')
