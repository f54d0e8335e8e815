"""`make test` keeps what it ran of each notebook for the site (eagle_nb.docs.check_notebook): nbdev_test's semantics (flags
from settings.ini, `--flags` forcing them), the executed copy and its stamp where `build_site` looks, nothing kept on failure."""
import json
import pytest
from eagle_nb.core import EagleNbError
from eagle_nb.docs import check_notebook, _sha

def _nb(path, *cells):
    path.write_text(json.dumps(dict(nbformat=4, nbformat_minor=5, metadata={}, cells=[
        dict(cell_type='code', id=f'c{i}', metadata={}, execution_count=None, outputs=[], source=s) for i, s in enumerate(cells)])))
    return path

def _outputs(path):
    return [''.join(''.join(o.get('text', '')) + ''.join(o.get('data', {}).get('text/plain', '')) for o in c['outputs'])
            for c in json.loads(path.read_text())['cells']]

def test_the_executed_copy_is_kept_with_its_stamp(tmp_path):
    src = _nb(tmp_path/'t.ipynb', 'x = 6 * 7\nx', '#| slow\nprint("slow ran")', '#| eval: false\nraise SystemExit("never run")')
    ex = tmp_path/'_exec'
    assert check_notebook(src, exec_dir=ex) > 0
    assert _outputs(ex/'t.ipynb') == ['42', '', '']                     # `slow` is in tst_flags: skipped unless forced
    assert (ex/'t.ipynb.sha').read_text() == _sha(src)                 # what build_site checks before executing again
    check_notebook(src, flags=['slow'], exec_dir=ex)
    assert _outputs(ex/'t.ipynb')[:2] == ['42', 'slow ran\n']
    assert json.loads(src.read_text())['cells'][0]['outputs'] == []    # the source stays clean

def test_a_failing_notebook_raises_and_keeps_nothing(tmp_path, capsys):
    ex = tmp_path/'_exec'
    src = _nb(tmp_path/'t.ipynb', 'x = 1')
    check_notebook(src, exec_dir=ex)
    _nb(src, 'x = 1', 'raise ValueError("boom")')
    with pytest.raises(EagleNbError, match='t.ipynb failed to execute.*boom'): check_notebook(src, exec_dir=ex)
    assert 'ValueError' in capsys.readouterr().err                      # the cell's traceback, as nbdev_test prints it
    assert not (ex/'t.ipynb.sha').exists()                              # the earlier copy is no longer taken for this source
