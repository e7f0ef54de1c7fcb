"""Shared set-up of the legacy corpus: programs run unchanged after `compat_distribute.install()`.

`legacy_tpu` runs an eager program's calls on a fake v4-8 (4 replicas on this
session's virtual CPUs) with TF's historical names routed to the shims;
`run_legacy_script` runs a program file as `python file.py` would, in a process
of its own (graph-mode programs switch TF1 behaviour on process-wide), with the
same set-up (or another fake topology, a pod's included), and returns its
output lines. The process is forked from a warm interpreter of the program's
environment (tf-keras programs share one), or fresh where its exit is checked.
`two_workers` is a 2-worker local cluster shared by the corpus's multi-worker programs.
"""

import os
import time

import pytest

import compat_distribute
from compat_distribute.testing import fake_tpu
from compat_distribute.testing import local_cluster

# A process whose program has ended must be gone within this (a loaded machine included).
EXIT_BOUND_S = 20

HERE = os.path.dirname(os.path.abspath(__file__))

_SCRIPT_DRIVER = """
import faulthandler, runpy, sys
faulthandler.dump_traceback_later({timeout}, exit=True)  # a stall shows its stack
from compat_distribute.testing import devices
devices.set_virtual_devices(8)
import compat_distribute
from compat_distribute.testing import fake_tpu
sys.argv = [{path!r}] + {args!r}
with fake_tpu({topology!r}), compat_distribute.installed():
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exit:
        if exit.code not in (None, 0):
            raise
import time
print(f"program ended at {{time.time()!r}}", flush=True)
if not {exit_normally!r}:
    from compat_distribute import _exit
    _exit.end_process(0)  # atexit clean-up (AutoGraph's temp files), then no TF teardown
"""


@pytest.fixture(name="legacy_tpu")
def legacy_tpu_fixture():
    with fake_tpu("v4-8"), compat_distribute.installed():
        yield


@pytest.fixture(name="two_workers", scope="session")
def two_workers_fixture():
    """One cluster runs every multi-worker program of the corpus, one after another."""
    with local_cluster(num_workers=2, timeout=180) as cluster:
        yield cluster


@pytest.fixture(name="run_legacy_script")
def run_legacy_script_fixture(run_python):
    def run(name, *args, timeout=240, topology="v4-8", env=None, exit_normally=False,
            with_stderr=False):
        """The script's output lines; `exit_normally` lets Python and TensorFlow end the
        process as a user's run would, and checks that this takes under 20 s;
        `with_stderr` returns (lines, stderr)."""
        path = os.path.join(HERE, name)
        driver = _SCRIPT_DRIVER.format(
            path=path, args=list(args), timeout=timeout - 20, topology=topology,
            exit_normally=exit_normally,
        )
        result = run_python(
            driver,
            timeout=timeout,
            env=env,
            fresh=exit_normally,  # Its exit time is a fresh process's, TensorFlow's teardown included.
            shared_env=True,  # tf-keras programs (TF_USE_LEGACY_KERAS=1) fork from one interpreter
        )
        exited = time.time()
        assert result.returncode == 0, f"{name} failed:\n{result.stderr[-6000:]}"
        lines = result.stdout.splitlines()
        ended = float(lines[-1].removeprefix("program ended at "))
        if exit_normally:
            assert exited - ended < EXIT_BOUND_S, f"{name} took {exited - ended:.1f} s to exit"
        return (lines[:-1], result.stderr) if with_stderr else lines[:-1]

    return run
