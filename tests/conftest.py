"""Shared set-up: one TensorFlow runtime per test session, with 8 virtual CPUs.

Tests that need another device configuration run in a subprocess
(see `run_python`), never by resetting TensorFlow's private state.
"""

import os
import subprocess
import sys
import textwrap

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SESSION_CPUS = 8


def pytest_configure(config):
    from compat_distribute.testing import devices

    devices.set_virtual_devices(SESSION_CPUS)


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


@pytest.fixture(name="run_python")
def run_python_fixture():
    return run_python
