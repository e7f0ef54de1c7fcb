# Each target builds .venv from scratch when it is missing or setup.cfg changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST := $(PY) -m pytest -p no:cacheprovider

.PHONY: smoke test test-fast test-multi-worker bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

smoke: $(STAMP)
	$(VENV)/bin/compat-distribute smoke

# Two workers, each test file on one of them (its module fixtures start once):
# most of the suite's time is spent waiting on subprocesses, so two overlap well.
test: $(STAMP)
	$(PYTEST) -n 3 --dist loadfile tests

test-fast: $(STAMP)
	$(PYTEST) -m 'not multi_worker' tests

test-multi-worker: $(STAMP)
	$(PYTEST) -m multi_worker tests

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
