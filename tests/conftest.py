import os, sys
from pathlib import Path
os.environ.setdefault('EAGLE_NB_PROGRESS', '0')
ROOT = Path(__file__).resolve().parents[1]

def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: uses the real SmolLM2 target or takes more than a few seconds')
