"""tools/pip_install.py (the Makefile's `pip install`, through uv): pip's package sources handed to uv as pip reads them."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]/'tools'))
from pip_install import pip_config, pip_settings


def test_pip_sources_become_uv_flags(tmp_path):
    wheels, index = tmp_path/'wheels', tmp_path/'simple'
    wheels.mkdir(); index.mkdir(); cons = tmp_path/'c.txt'; cons.write_text('torch<=2.14.1\n')
    listing = '\n'.join([f":env:.cert='/etc/ssl/certs/ca-certificates.crt'", ":env:.default-timeout='180'",
                         f"global.find-links='{wheels} {tmp_path}/gone'",
                         f"global.extra-index-url='file://{index} file://{tmp_path}/nowhere https://example.org/simple'",
                         f"global.constraint='{cons}'", "global.index-url='https://pypi.org/simple'",
                         f":env:.find-links='{wheels}'"])     # a later scope wins, as in pip
    assert pip_settings(listing) == ['--find-links', str(wheels), '--index-url', 'https://pypi.org/simple',
                                     '--extra-index-url', f'file://{index}', '--extra-index-url', 'https://example.org/simple',
                                     '--constraint', str(cons)]
    assert pip_settings("global.no-index='true'") == ['--no-index']
    assert pip_settings('') == []
    assert pip_config(listing)['cert'] == '/etc/ssl/certs/ca-certificates.crt' and pip_config(listing)['default-timeout'] == '180'
