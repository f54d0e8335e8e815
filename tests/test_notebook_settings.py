"Settings defined once: each runnable notebook's parameters are its config's settings (tests/run_all.py checks it), and CLI help comes from the same comments."
import json, shutil, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'tests'))
import run_all

def test_shipped_notebooks_and_profiles_agree():
    assert run_all.settings_problems() == []

def _copy_nbs(tmp_path):
    d = tmp_path/'nbs'; d.mkdir()
    for n in run_all.NOTEBOOK_SETTINGS: shutil.copy(run_all.NBS/n, d/n)
    return d

def _edit_parameters(path, edit):
    nb = json.loads(path.read_text())
    c = next(c for c in nb['cells'] if 'parameters' in c.get('metadata', {}).get('tags', []))
    c['source'] = edit(''.join(c['source']))
    path.write_text(json.dumps(nb))

@pytest.mark.parametrize('old,new,says', [
    ("compile: bool = False", "compile_loss: bool = False", 'parameter `compile_loss` is not a setting of TrainConfig'),   # renamed
    ("lr: float = 1e-2", "lr: int = 1", '`lr: int`, but TrainConfig.lr is float'),                                         # retyped
    ("# peak learning rate (one window per step; 1e-3 with the target's lm_head learns most per token, 10_payoff)", "# learning rate", "the help is TrainConfig.lr's comment"),  # re-helped
])
def test_a_drifted_train_parameter_is_named(tmp_path, old, new, says):
    d = _copy_nbs(tmp_path)
    _edit_parameters(d/'03_train.ipynb', lambda s: (s.replace(old, new) if old in s else pytest.fail(f'{old!r} not in the cell')))
    probs = run_all.settings_problems(nbs=d, profiles=[])
    assert any(says in p for p in probs), probs

def test_an_alias_and_an_unknown_profile_name_are_named(tmp_path):
    d = _copy_nbs(tmp_path)
    _edit_parameters(d/'01_extract.ipynb', lambda s: s.replace("target: str = 'tiny-llama'", "target_name: str = 'tiny-llama'"))
    table = {**run_all.NOTEBOOK_SETTINGS, '01_extract.ipynb': (('eagle_nb.extract', 'ExtractConfig'), ['target_name', 'data', 'out', 'metrics_out'])}
    prof = tmp_path/'p.yaml'
    prof.write_text("stages:\n  - name: extract\n    notebook: 01_extract.ipynb\n    parameters:\n      target: smollm2-135m\n")
    probs = run_all.settings_problems(nbs=d, table=table, profiles=[prof])
    assert any('`target_name`: call it `target`' in p for p in probs), probs
    assert any('p.yaml: stage extract: `target` is not a parameter of 01_extract.ipynb' in p for p in probs), probs

def test_a_cell_that_rebinds_a_parameter_before_the_build_is_named(tmp_path):
    d = _copy_nbs(tmp_path)
    nb = json.loads((d/'00_data.ipynb').read_text())
    i = next(i for i, c in enumerate(nb['cells']) if 'parameters' in c.get('metadata', {}).get('tags', []))
    nb['cells'].insert(i + 1, dict(cell_type='code', metadata={}, outputs=[], execution_count=None, source="limit = 3"))
    (d/'00_data.ipynb').write_text(json.dumps(nb))
    probs = run_all.settings_problems(nbs=d, profiles=[])
    assert any('rebinds `limit`' in p for p in probs), probs

def test_cli_help_is_the_field_comment():
    from eagle_nb.core import field_help
    from eagle_nb.train import TrainConfig, _parser as train_parser
    from eagle_nb.eval import EvalConfig, _parser as eval_parser
    for cls, parser in ((TrainConfig, train_parser), (EvalConfig, eval_parser)):
        helps, flags = field_help(cls), {a.dest: a.help for a in parser()._actions}
        assert set(helps) == set(cls.__dataclass_fields__), set(cls.__dataclass_fields__) - set(helps)   # every field has its help
        for k, h in helps.items(): assert flags[k].startswith(h), (k, flags[k], h)
        parser().format_help()   # and argparse can format it
