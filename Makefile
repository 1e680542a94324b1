# The whole developer interface.  `make test` needs nothing installed first:
# it builds .venv and installs the Python dependencies when they are missing.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EMACS  ?= emacs

.PHONY: install test lint pytest ert bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check forj_py tests bench
	$(PY) -m ruff format --check forj_py tests bench
	$(PY) -m mypy

# pytest exits 5 when it collects nothing; that is not a failure of ours.
pytest: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

ert:
	@if ls test-el/*-test.el >/dev/null 2>&1; then \
	  $(EMACS) -Q --batch -L elisp -L test-el \
	    $(foreach f,$(wildcard test-el/*-test.el),-l $(f)) \
	    -f ert-run-tests-batch-and-exit; \
	else echo "ert: no Emacs tests yet"; fi

test: lint pytest ert

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
