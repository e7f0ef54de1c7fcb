"""Shared set-up: one TensorFlow runtime per test session, with 8 virtual CPUs.

The 8 CPUs come from the compat_distribute pytest plugin (`tf_devices = 8` in
setup.cfg's [tool:pytest]), which splits the CPU before any test imports
TensorFlow. Tests that need another device configuration run in a subprocess
(see `support.programs.run_python`), never by resetting TensorFlow's private state.
"""

import importlib.metadata
import os

import pytest

from support import programs
from support.programs import run_program, run_python

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_sessionfinish(session):
    del session
    programs.stop_warm_pythons()


def _keras_version():
    for distribution in ("keras", "keras-nightly"):  # the same package, `keras`
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


# Tests about Keras 3 (its bugs, its variables, its warnings) carry
# @pytest.mark.requires_keras3. TensorFlow 2.15 pins the keras package to Keras 2.
KERAS_VERSION = _keras_version()
IS_KERAS_3 = KERAS_VERSION is not None and int(KERAS_VERSION.split(".")[0]) >= 3


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "requires_keras3: the test is about Keras 3; skipped where the keras package is Keras 2",
    )


def pytest_runtest_setup(item):
    if item.get_closest_marker("requires_keras3") and not IS_KERAS_3:
        pytest.skip(f"needs Keras 3; the keras package here is {KERAS_VERSION} (Keras 2, "
                    f"as TensorFlow 2.15 pins it)")


@pytest.fixture(name="run_python", scope="session")
def run_python_fixture():
    return run_python


@pytest.fixture(name="run_program", scope="session")
def run_program_fixture():
    return run_program


# The files that take longest (CPU seconds of every process they start, measured
# in docs/benchmarks.md's "Suite time"), longest first. `make test` hands files to
# its xdist workers in collection order (--no-loadscope-reorder), so these start
# first and the short files fill in around them, instead of a long file starting
# last and running alone at the end.
LONGEST_FIRST = (
    "tests/shims/test_keras_tpu_logs.py",
    "tests/pods/test_fake_tpu_pods.py",
    "tests/docs/test_docs_examples.py",
    "tests/legacy/test_programs_pod_fit.py",
    "tests/pods/test_fake_tpu_pod_assignments.py",
    "tests/shims/test_keras.py",
    "tests/legacy/test_public_programs.py",
    "tests/plugin/test_plugin_devices.py",
    "tests/smoke/test_cli.py",
    "tests/fake_tpu/test_step_variables.py",
    "tests/pods/test_pod_keras.py",
    "tests/legacy/test_corpus.py",
    "tests/cluster/test_cluster_zygote.py",
    "tests/fake_tpu/test_inter_op_pool.py",
    "tests/cluster/test_cluster_fixture.py",
    "tests/pods/test_pod_clients_side_by_side.py",
    "tests/legacy/test_programs_step_variables.py",
    "tests/cluster/test_cluster_control.py",
    "tests/legacy/test_keras_graph_fit.py",
    "tests/fake_tpu/test_fake_tpu_input_exit.py",
    "tests/fake_tpu/test_one_trace.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath
    missing = [path for path in LONGEST_FIRST if not (root / path).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names files that do not "
                                f"exist: {missing}; update it to the files' new paths")
    # Stable: a file's tests keep their order, and the other files theirs.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
