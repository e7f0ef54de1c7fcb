"""Shared set-up: one TensorFlow runtime per test session, with 8 virtual CPUs.

The 8 CPUs come from the compat_distribute pytest plugin (`tf_devices = 8` in
setup.cfg's [tool:pytest]), which splits the CPU before any test imports
TensorFlow. Tests that need another device configuration run in a subprocess
(see `run_python`), never by resetting TensorFlow's private state.
"""

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

import forkrun
from compat_distribute.testing import deadlines

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The session's warm interpreter (see `forkrun`), started on first use.
_warm = None


def run_program(argv, *, timeout=120, env=None, cwd=None, fresh=False):
    """Runs `python *argv` (["-c", code, ...] or [script, ...]) with os.environ
    updated by `env`; returns the CompletedProcess (text stdout and stderr).

    The program is forked from the session's warm interpreter, which has
    imported TensorFlow and numpy (see `forkrun`), unless `fresh` is true or
    its environment differs in a variable read at import: then it runs in a
    fresh process. `timeout` is scaled by $COMPAT_DISTRIBUTE_TIMEOUT_SCALE (see
    `deadlines`); on timeout the program's process group is killed and
    subprocess.TimeoutExpired raised.
    """
    global _warm
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    timeout = deadlines.scaled(timeout)
    if not fresh:
        if _warm is None:
            _warm = forkrun.WarmPython(dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        if _warm.forkable(full_env):
            return _warm.run(list(argv), env=full_env, timeout=timeout, cwd=cwd)
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )


def run_python(code, *, timeout=120, env=None, fresh=False):
    """Runs `code` as `python -c` (see `run_program`); returns the CompletedProcess.

    `fresh=True`: a fresh process, for a program about a fresh interpreter
    (what is imported, import-time behaviour, exit timing).
    """
    return run_program(["-c", textwrap.dedent(code)], timeout=timeout, env=env, fresh=fresh)


def pytest_sessionfinish(session):
    del session
    global _warm
    if _warm is not None:
        _warm.stop()
        _warm = None


def _keras_version():
    try:
        return importlib.metadata.version("keras")
    except importlib.metadata.PackageNotFoundError:
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
