"""local_cluster from a script: each task imports the script's module to find the
function it runs, so code that starts the cluster must sit under the `__main__`
guard; without it, the run fails at once naming the guard."""

import os
import subprocess
import sys
import textwrap

import pytest

from compat_distribute.testing import deadlines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_STEP = """\
from compat_distribute.testing import local_cluster, worker_strategy

def step(x):  # module level: each task imports it by module:qualname
    s = worker_strategy()  # a MultiWorkerMirroredStrategy, built once per task
    return float(s.experimental_local_results(s.run(lambda: x * 2.0))[0])
"""

_UNGUARDED = (
    _STEP
    + """
with local_cluster(2) as cluster:
    print(cluster.run(step, 21.0))
"""
)

_GUARDED = (
    _STEP
    + """
if __name__ == "__main__":
    with local_cluster(2) as cluster:
        print(cluster.run(step, 21.0))
"""
)


def _run_script(tmp_path, source):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=deadlines.scaled(180),
        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"),
    )


@pytest.mark.multi_worker(2)
def test_a_script_without_the_main_guard_fails_at_once_naming_the_guard(tmp_path):
    result = _run_script(tmp_path, _UNGUARDED)
    assert result.returncode == 1, result.stderr[-3000:]
    # Not the start or call timeout (120 s): the first task to import the script fails.
    assert "ClusterTimeoutError" not in result.stderr
    # The task's RuntimeError, as a ClusterTaskError that is also a RuntimeError.
    assert (
        "compat_distribute.testing.cluster.errors.ClusterTaskError[RuntimeError]: local_cluster: "
        "worker" in result.stderr
    )
    assert (
        "imported the module 'train' to run train:step, and that module's top level started "
        "processes again (a local_cluster or a fake TPU pod). Each task imports the module of "
        "the function it runs, as multiprocessing does, so a script's top-level code runs again "
        "in every task. Put the code that starts the cluster under "
        '`if __name__ == "__main__":` at the bottom of the script, and keep the functions the '
        "tasks run at the top level above it."
    ) in result.stderr
    assert result.stdout == ""


@pytest.mark.multi_worker(2)
def test_the_same_script_with_the_main_guard_runs(tmp_path):
    result = _run_script(tmp_path, _GUARDED)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "[42.0, 42.0]\n"
