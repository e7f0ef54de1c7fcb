"""Runs a pod program (pod_programs.py) in a client process of its own.

Connecting to a pod changes a process's TensorFlow context for good, so pod
programs never run inside the test process.
"""

import json
import os
import subprocess
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PROGRAM_TIMEOUT_S = 300


def client(name, *args, env=None):
    """Runs pod program `name` in a fresh client process; returns its RESULT."""
    result = subprocess.run(
        [sys.executable, os.path.join(TESTS_DIR, "pod_programs.py"), name, *args],
        capture_output=True,
        text=True,
        timeout=PROGRAM_TIMEOUT_S,
        env=client_env(env),
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-5000:]
    return json.loads(lines[-1][len("RESULT ") :])


def client_env(extra=None):
    """This process's environment for a pod client, the tests' helpers importable."""
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([TESTS_DIR] + sys.path),
        TF_CPP_MIN_LOG_LEVEL="2",
        **(extra or {}),
    )
