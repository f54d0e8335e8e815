"""tools/upstream.py: the speculators directory is keyed by its pins, and a package the project venv has is never shadowed."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location('_upstream', Path(__file__).resolve().parents[1]/'tools'/'upstream.py')
upstream = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(upstream)


def test_shadows_names_only_packages_this_interpreter_has(tmp_path):
    for name in ('torch', '_ctypes', 'eagle_nb_no_such_pkg_1', '_eagle_nb_no_such_pkg_3'): (tmp_path/name).mkdir()
    (tmp_path/'json.py').write_text('')                       # a module file shadows too
    (tmp_path/'eagle_nb_no_such_mod_2.py').write_text('')
    for skip in ('torch-2.0.dist-info', 'bin', '__pycache__', '.complete'): (tmp_path/skip).mkdir(exist_ok=True)
    assert upstream._shadows(tmp_path) == ['_ctypes', 'json', 'torch']


def test_dir_is_keyed_by_pins(tmp_path, monkeypatch):
    monkeypatch.setenv('EAGLE_NB_HOME', str(tmp_path))
    d = upstream.target_dir()
    assert d.parent == tmp_path/'upstream' and d.name == f'speculators-{upstream.key()}' and not upstream.ready()
    monkeypatch.setattr(upstream, 'PINS', upstream.PINS + ('x==1',))
    assert upstream.target_dir() != d
    assert all('==' in p for p in upstream.PINS)              # every pin exact: the key names one install
