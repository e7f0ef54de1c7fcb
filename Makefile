# Each target builds its virtual environment when it is missing or setup.cfg changed.
#
#   make smoke | test | test-fast          on the newest TensorFlow the package takes (.venv)
#   make test-fast TF=2.15.1               the same on TensorFlow 2.15.1 (.venv-2.15.1), and so on
#   make test-fast TF=nightly              on the newest tf-nightly, keras-nightly and
#                                          tf-keras-nightly (.venv-nightly, upgraded each run)
#   make wheel-check                       the wheel as users get it, tried outside the tree
PYTHON ?= python3
TF ?=
VENV := $(if $(TF),.venv-$(TF),.venv)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST := $(PY) -m pytest -p no:cacheprovider

# Extras by TensorFlow version (setup.cfg explains them). TF 2.15's tf.keras is
# Keras 2 and it pins keras<2.16, so no keras3 there; tf-keras (legacy) is on
# every version, since TF 2.15 too reads TF_USE_LEGACY_KERAS=1 and then needs it.
comma := ,
KERAS_2_ONLY := $(filter 2.15 2.15.%,$(TF))
EXTRAS := $(if $(KERAS_2_ONLY),test$(comma)legacy,test$(comma)keras3$(comma)legacy)
TF_PIN := $(if $(TF),tensorflow==$(TF))
# The nightlies are other distributions than tensorflow, keras and tf-keras: the
# package goes in without its requirements, and the nightlies and test tools beside it.
NIGHTLY := $(filter nightly,$(TF))
NIGHTLIES := tf-nightly keras-nightly tf-keras-nightly absl-py pytest pytest-xdist

# The subset `make test-fast` runs (about a third of the suite): the shims and
# their member table and adapter pins, the fake TPU and its conformance rows, the
# plugin, the smoke command, one local cluster (test_cluster_runs), packaging and
# the generated docs. A path here that does not exist fails the run
# (tests/test_packaging.py checks them too).
FAST_TESTS := tests/shims tests/fake_tpu tests/plugin tests/smoke tests/conformance \
	tests/cluster/test_cluster_runs.py tests/test_packaging.py tests/docs/test_generated_blocks.py

.PHONY: smoke test test-fast test-multi-worker wheel-check bench clean $(if $(NIGHTLY),$(STAMP))

$(STAMP): setup.cfg pyproject.toml
	@test -x $(PY) || echo "Creating $(VENV): the first install downloads TensorFlow and its dependencies, about 1.5 GB."
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
ifeq ($(NIGHTLY),)
	$(PY) -m pip install -q --disable-pip-version-check $(TF_PIN) -e '.[$(EXTRAS)]'
else
	$(PY) -m pip install -q --disable-pip-version-check --pre --upgrade $(NIGHTLIES)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	@$(PY) -m pip list --disable-pip-version-check 2>/dev/null | grep -i nightly
endif
	touch $(STAMP)

smoke: $(STAMP)
	$(VENV)/bin/compat-distribute smoke

# Three workers, each test file on one of them (its module fixtures start
# once): most of the suite's time is spent waiting on subprocesses (cluster
# workers, pod hosts, graph-mode programs), so a third worker overlaps those
# waits even on two cores. Files go to the workers in collection order, the
# longest first (LONGEST_FIRST in tests/conftest.py): xdist's own order, most
# tests first, would start long files of few tests last, to run alone at the
# end. The last line is the suite's wall and CPU time (the CPU time of every
# process, which other users' load does not swing); the 15 slowest tests are
# listed above it.
test: $(STAMP)
	$(PY) tools/suite_time.py $(PYTEST) -n 3 --dist loadfile --no-loadscope-reorder --durations=15 tests

test-fast: $(STAMP)
	$(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder $(FAST_TESTS)

test-multi-worker: $(STAMP)
	$(PYTEST) -m multi_worker tests

# Builds the wheel and installs it into a fresh venv, then runs the command and
# a small user project from outside the tree (tools/wheel_check.py says what).
wheel-check: $(STAMP)
	$(PY) tools/wheel_check.py --tf-venv $(VENV)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf .venv .venv-* build dist *.egg-info
