"""Shared set-up: one TensorFlow runtime per test session, with 8 virtual CPUs.

The 8 CPUs come from the compat_distribute pytest plugin (`tf_devices = 8` in
setup.cfg's [tool:pytest]), which splits the CPU before any test imports
TensorFlow. Tests that need another device configuration run in a subprocess
(see `run_python`), never by resetting TensorFlow's private state.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from compat_distribute import _exit
from compat_distribute.testing import deadlines

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_python(code, *, timeout=120, env=None):
    """Runs `code` in a fresh Python process; returns the CompletedProcess.

    `timeout` is scaled by $COMPAT_DISTRIBUTE_TIMEOUT_SCALE (see `deadlines`).
    """
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=deadlines.scaled(timeout),
        env=full_env,
    )


@pytest.fixture(name="run_python", scope="session")
def run_python_fixture():
    return run_python


# TensorFlow 2.21 can block for minutes at interpreter exit (see
# compat_distribute._exit). Every result is reported by then, so the session
# ends the process itself, with pytest's exit status, once every other plugin
# has unconfigured.
_EXIT_STATUS = []


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if _EXIT_STATUS and not hasattr(config, "workerinput"):  # not inside an xdist worker
        _exit.end_process(_EXIT_STATUS[-1])
