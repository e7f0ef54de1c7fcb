"""A test's Python program: forked from a warm interpreter (see `forkrun`), or run fresh."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import workdir
from compat_distribute.testing.cluster import zygote
from support import forkrun

# The folder holding `support`: on a program's PYTHONPATH when it imports it.
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The session's warm interpreters (see `forkrun`), started on first use: the
# default one (this environment) first, then one per `shared_env` given.
_warm = []


def _warm_python(env, shared_env):
    if not zygote.wanted():  # COMPAT_DISTRIBUTE_ZYGOTE=0: fresh processes, as tasks
        return None
    if threading.current_thread() is not threading.main_thread():
        # Its parent-death signal fires when the thread that started it ends,
        # and one connection serves one caller at a time.
        return None
    if not shared_env and not forkrun.same_at_import(env, _default_env()):
        return None
    for warm in _warm:
        if warm.forkable(env):
            return warm
    _warm.append(forkrun.WarmPython(env if shared_env else _default_env()))
    return _warm[-1]


def _default_env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def run_program(argv, *, timeout=120, env=None, cwd=None, fresh=False, shared_env=False):
    """Runs `python *argv` (["-c", code, ...] or [script, ...]) with os.environ
    updated by `env`; returns the CompletedProcess (text stdout and stderr).

    The program is forked from a warm interpreter that has imported TensorFlow
    and numpy (see `forkrun`) unless `fresh` is true or its environment differs
    from that interpreter's in a variable read at import: then it runs in a
    fresh process (so do all with COMPAT_DISTRIBUTE_ZYGOTE=0, as cluster
    tasks do). Unless `env` names a TMPDIR, the program gets a TMPDIR of its
    own, removed after it; a program that exits 0 must leave it empty.
    `shared_env`: many programs share this environment, so it gets a warm
    interpreter of its own. `timeout` is scaled by
    $COMPAT_DISTRIBUTE_TIMEOUT_SCALE (see `deadlines`); on timeout the
    program's process group is killed and subprocess.TimeoutExpired raised.
    """
    full_env = dict(_default_env(), **(env or {}))
    timeout = deadlines.scaled(timeout)
    warm = None if fresh else _warm_python(full_env, shared_env)
    own_temp = "TMPDIR" not in (env or {})
    if own_temp:
        full_env["TMPDIR"] = tempfile.mkdtemp(prefix="program-")
    try:
        if warm is not None:
            result = warm.run(list(argv), env=full_env, timeout=timeout, cwd=cwd)
        else:
            result = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                                    timeout=timeout, env=full_env, cwd=cwd)
    finally:
        left = []
        if own_temp:
            left = sorted(os.listdir(full_env["TMPDIR"]))
            shutil.rmtree(full_env["TMPDIR"], ignore_errors=True)
    # A program that ends well leaves nothing behind (AutoGraph's sources go in
    # an atexit handler, which os._exit skips) but the logs a cluster keeps
    # after a task's error, which stay by design (docs/clusters.md).
    left = [name for name in left if not name.startswith(workdir.LOGS_PREFIX)]
    assert result.returncode != 0 or not left, (
        f"the program ended with status 0 but left {left} in its TMPDIR; "
        f"its stderr ends:\n{result.stderr[-2000:]}")
    return result


def run_python(code, *, timeout=120, env=None, fresh=False, shared_env=False):
    """Runs `code` as `python -c` (see `run_program`); returns the CompletedProcess.

    `fresh=True`: a fresh process, for a program about a fresh interpreter
    (what is imported, import-time behaviour, exit timing).
    """
    return run_program(["-c", textwrap.dedent(code)], timeout=timeout, env=env, fresh=fresh,
                       shared_env=shared_env)


def stop_warm_pythons():
    """Ends the session's warm interpreters (at the session's end)."""
    while _warm:
        _warm.pop().stop()
