# hpcmon: every target sets up what it needs (virtualenv, Debian servers) on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hpcmon-installed
PYTHON ?= python3

.PHONY: test check demo bench lint docs servers venv clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# checkov in its own virtualenv (pyproject's `scan` extra: its pins clash with the test extra)
CHECKOV_VENV ?= .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.hpcmon-installed
$(CHECKOV_STAMP): pyproject.toml
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q '.[scan]'
	touch $(CHECKOV_STAMP)

venv: $(STAMP) $(CHECKOV_STAMP)

servers:
	./scripts/install-servers.sh

# The whole suite on four pytest-xdist workers (tests/conftest.py groups them: one module per
# worker, the Slurm modules one after another, the slowest first); at most 10 minutes on 2 cores.
PYTEST := $(PY) -m pytest -q -p no:cacheprovider
test: venv servers
	$(PYTEST) -n 4 --dist loadscope --no-loadscope-reorder tests

# The inner loop: unit and property tests, no servers, nothing slow, in about a minute.
check: $(STAMP)
	$(PYTEST) -n 2 --dist loadscope --no-loadscope-reorder -m "not integration and not slow" tests

demo: venv servers
	$(PY) -m devtools.demo $(DEMO_ARGS)

bench: venv servers
	$(PY) benchmarks/run_all.py

# the documentation site into site/; strict: a broken link or anchor fails. The reference pages
# are generated from the code: `$(PY) -m devtools.docs_reference --write` (make test checks them).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pyright

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) build *.egg-info demo-run bench-results site
