"""What the pod test modules share: a pod program's client process and its environment."""

import json
import os
import sys

from compat_distribute.testing import deadlines

from support import programs
from support.programs import TESTS

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
# What one pod program may take (4 host processes import TensorFlow); scaled.
PROGRAM_TIMEOUT_S = 300


def program_timeout():
    return deadlines.scaled(PROGRAM_TIMEOUT_S)


def env(extra=None):
    """The environment of a pod program: this package, this folder and the
    tests' `support` importable, TensorFlow's C++ logs quiet."""
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([ROOT, HERE, TESTS] + sys.path),
        TF_CPP_MIN_LOG_LEVEL="2",
        **(extra or {}),
    )


def program_command(file, name, *args):
    return [sys.executable, os.path.join(HERE, file), name, *args]


def run_program(file, name, *args, extra_env=None):
    """Runs program `name` of `file` (pod_programs.py, ...) in a client process of
    its own, forked from a warm interpreter that has imported TensorFlow (the pod
    programs share one; see `support.programs`); returns the JSON of its last
    RESULT line."""
    return run_program_and_stderr(file, name, *args, extra_env=extra_env)[0]


def run_program_and_stderr(file, name, *args, extra_env=None, fresh=False):
    """As `run_program`; returns (the JSON of its last RESULT line, its stderr).
    `fresh`: a new interpreter, which ends as a user's program does."""
    result = programs.run_program(
        [os.path.join(HERE, file), name, *args],
        timeout=PROGRAM_TIMEOUT_S,
        fresh=fresh,
        env=env(extra_env),
        shared_env=True,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-5000:]
    return json.loads(lines[-1][len("RESULT ") :]), result.stderr
