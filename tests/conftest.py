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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_python(code, *, timeout=120, env=None):
    """Runs `code` in a fresh Python process; returns the CompletedProcess."""
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


@pytest.fixture(name="run_python", scope="session")
def run_python_fixture():
    return run_python
