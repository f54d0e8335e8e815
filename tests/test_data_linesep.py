"Text with U+2028/U+2029 (raw in JSON written with ensure_ascii=False) must not split JSONL records: ShareGPT has such text."
import json
from eagle_nb.data import prepare_dataset, TokenizedDataset
from eagle_nb.eval import jsonl_prompts
from eagle_nb.target import load_target

def test_heldout_and_prompt_files_with_unicode_line_separators(tmp_path):
    convs = [{'id': f'c{i}', 'messages': [{'role': 'user', 'content': f'line one\u2028line two {i}\u2029end'},
                                          {'role': 'assistant', 'content': f'answer\u2028{i}'}]} for i in range(4)]
    src = tmp_path/'c.jsonl'; src.write_text(''.join(json.dumps(c, ensure_ascii=False) + '\n' for c in convs))
    prepare_dataset(src, 'tiny-llama', tmp_path/'ds', max_len=128, holdout=2, seed=0, draft_vocab_size=64)
    held = TokenizedDataset.open(tmp_path/'ds').heldout()
    assert len(held) == 2 and all('\u2028' in c.messages[0]['content'] for c in held)
    prompts = jsonl_prompts(src, load_target('tiny-llama').tokenizer)
    assert [p.id for p in prompts] == ['c0', 'c1', 'c2', 'c3']
