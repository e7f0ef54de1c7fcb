"""Nothing is left behind by a killed task or a killed parent: no process, no
log directory, no checkpoint in the temp dir, also after SIGKILL."""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import cluster_tasks as tasks
import pytest
from cluster_checks import assert_no_leaks
from cluster_checks import wait_gone

from compat_distribute.testing.cluster import ClusterTaskError
from compat_distribute.testing.cluster import local_cluster
from compat_distribute.testing.cluster import workdir


def _abandoned_dir(parent, task_pid):
    """What a parent killed by SIGKILL leaves: its cluster directory, naming a
    dead owner, with a log, a checkpoint and a task that still runs."""
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    path = parent / f"{workdir.PREFIX}{dead.pid}.{workdir.start_time(os.getpid())}-abc123"
    (path / "worker-1.tmp" / "ckpt").mkdir(parents=True)
    (path / "worker-1.tmp" / "ckpt" / "ckpt-1.index").write_bytes(b"x" * 1000)
    (path / "worker-1.log").write_text("worker 1 output\n")
    (path / workdir.TASKS_FILE).write_text(f"{task_pid} {workdir.start_time(task_pid)}\n")
    return path


@pytest.mark.multi_worker(2)
def test_worker_killed_by_sigkill_leaves_no_checkpoint_and_a_new_cluster_reaps_old_runs(
    temp_dir, tmp_path
):
    # A run killed earlier left a cluster directory and a task.
    leftover_task = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    abandoned = _abandoned_dir(temp_dir, leftover_task.pid)
    c = local_cluster(2, timeout=60).start()
    pids = c.pids
    # Starting reaped it: its task is killed, its directory gone.
    assert leftover_task.wait(timeout=10) == -signal.SIGKILL
    assert not abandoned.exists()
    assert os.listdir(temp_dir) == [os.path.basename(c.directory)]

    path = str(tmp_path / "ckpts")
    with pytest.raises(ClusterTaskError) as info:
        c.run(tasks.checkpoint_then_kill_worker_1, path)
    error = info.value
    assert (error.task_type, error.task_id, error.exitcode) == ("worker", 1, -signal.SIGKILL)
    assert str(error).startswith(
        "local_cluster: worker 1 was killed by SIGKILL during "
        "run(cluster_tasks:checkpoint_then_kill_worker_1). The cluster was torn down."
    )
    # Worker 1 saved a full checkpoint into its temporary directory ...
    saved = error.output_tail.splitlines()[-1]
    assert saved.startswith(f"saved {temp_dir}/{workdir.PREFIX}{os.getpid()}.")
    assert "/worker-1.tmp/compat_distribute_ckpt_worker1_" in saved
    assert saved.endswith(": ['checkpoint', 'ckpt-1.data-00000-of-00001', 'ckpt-1.index']")
    # ... which went with the cluster; only the chief's real checkpoint stays
    # (and the logs, kept after the fault).
    assert os.listdir(temp_dir) == [os.path.basename(error.logs)]
    assert "saved " in (pathlib.Path(error.logs) / "worker-1.log").read_text()
    assert sorted(os.listdir(path)) == ["checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index"]
    assert_no_leaks(pids)


_PARENT = """\
import os, sys, threading, time
import cluster_tasks
from compat_distribute.testing.cluster import local_cluster

def start():
    c = local_cluster(2, timeout=60, start_timeout=120).start()
    c.run(cluster_tasks.task_info, "up")
    print(c.directory, *c.pids, flush=True)

if sys.argv[1] == "thread":  # No parent-death signal: the thread that forked ends.
    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
else:
    start()
time.sleep(600)
"""


@pytest.mark.multi_worker(2)
@pytest.mark.parametrize("started_in", ["main", "thread"])
def test_tasks_die_with_a_parent_killed_by_sigkill_and_its_directory_is_reaped(
    started_in, tmp_path
):
    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_PARENT), started_in],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(
            os.environ,
            TMPDIR=str(temp_dir),
            PYTHONPATH=os.pathsep.join([tests_dir] + sys.path),
            TF_CPP_MIN_LOG_LEVEL="2",
        ),
    )
    try:
        directory, *pids = parent.stdout.readline().split()
        pids = [int(p) for p in pids]
        # The tasks' parent: the zygote that forked them (or the parent itself).
        forkers = {_parent_of(p) for p in pids}
        forkers_parents = {_parent_of(p) for p in forkers}
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    assert len(pids) == 2 and os.path.dirname(directory) == str(temp_dir)
    zygote = forkers - {parent.pid}
    assert len(forkers) == 1 and (not zygote or forkers_parents == {parent.pid})
    pids += list(zygote)  # It dies with the parent too.
    # The parent-death signal kills at once; the orphan watchdog within a second.
    assert wait_gone(pids, 5) == []
    # The killed parent could not remove its directory; the next cluster does.
    assert os.listdir(temp_dir) == [os.path.basename(directory)]
    assert workdir.reap_abandoned(str(temp_dir)) == [directory]
    assert os.listdir(temp_dir) == []


def _parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def test_reaping_leaves_the_directories_of_live_owners_and_strangers(tmp_path):
    mine = tmp_path / f"{workdir.PREFIX}{os.getpid()}.{workdir.start_time(os.getpid())}-live"
    mine.mkdir()
    # This pid, but a start time of another process: the owner is gone.
    reused = tmp_path / f"{workdir.PREFIX}{os.getpid()}.1-reused"
    reused.mkdir()
    stranger = tmp_path / "local_cluster-not-ours"
    stranger.mkdir()
    assert workdir.reap_abandoned(str(tmp_path)) == [str(reused)]
    assert sorted(os.listdir(tmp_path)) == sorted([mine.name, stranger.name])
