# eagle_nb: `make demo` and `make test` each set up everything from a fresh clone.
SHELL := /bin/bash
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed
export EAGLE_NB_PROGRESS ?= 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
PROFILE ?= quick

.PHONY: install provision engines upstream browser demo test test-fast bench docs readme export clean help

help:
	@echo "make demo   set up .venv, provision SmolLM2 + data, run the pipeline headless (PROFILE=quick|full)"
	@echo "make test   set up .venv, provision, then every check and test (ends with 'N passed, N failed')"
	@echo "make engines  build the real engines' own venvs (vLLM, SGLang) in $$EAGLE_NB_HOME/engines when missing"
	@echo "make upstream  install speculators (for the upstream export test) in $$EAGLE_NB_HOME/upstream when missing"
	@echo "make bench  benchmarks in bench/ (ratios measured side by side)"
	@echo "make docs   build the documentation site into _docs/"
	@echo "make clean  remove build outputs and runs (keeps .venv and the provisioned cache)"

# The venv is rebuilt when the pins (settings.ini) or setup.py change. torch goes in first and alone:
# the CPU wheel 2.13.0; anything that lets pip choose torch itself pulls several GB of CUDA.
# tools/pip_install.py is `pip install` through uv (46 s instead of pip's 104 s here), with pip's own settings, falling
# back to pip; EAGLE_NB_PIP=pip makes it pip throughout.
$(STAMP): settings.ini setup.py tools/pip_install.py
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python tools/pip_install.py install -q torch==2.13.0
	$(BIN)/python tools/pip_install.py install -q -e ".[dev]"
	$(BIN)/python -m pip check
	@touch $(STAMP)

install: $(STAMP)

provision: install
	$(BIN)/eagle-nb provision

# Real engines (vLLM CPU build, SGLang) each live in a venv of their own, keyed by their pins (eagle_nb.engines): built once
# per machine (a few minutes, ~3.5 GB for vLLM), reused by every clone afterwards.
engines: install
	$(BIN)/eagle-nb engines build all

# the upstream speculators package for tests/test_drafter_upstream.py, in a directory of its own (it cannot go in the venv:
# it declares torchvision/torchaudio); keyed by its pins in $EAGLE_NB_HOME/upstream, built once per machine
upstream: install
	$(BIN)/python tools/upstream.py build

demo: provision
	$(BIN)/eagle-nb demo --profile $(PROFILE)

# the docs test opens the site in headless Chromium (Debian's package; installed here when missing)
browser:
	@command -v chromium >/dev/null || { echo "installing chromium (apt) for the docs browser test"; \
	  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "WARNING: could not install chromium; the browser test will fail"; }

test: provision engines upstream browser
	EAGLE_NB_PROGRESS=0 EAGLE_NB_REQUIRE_UPSTREAM=1 $(BIN)/python tests/run_all.py

test-fast: install
	EAGLE_NB_PROGRESS=0 $(BIN)/python tests/run_all.py --fast

bench: provision
	@for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

docs: install
	$(BIN)/eagle-nb docs

readme: install
	$(BIN)/eagle-nb docs readme

export: install
	$(BIN)/nbdev_export
	$(BIN)/nbdev_clean

clean:
	rm -rf _docs _proc _runs build dist *.egg-info .pytest_cache
