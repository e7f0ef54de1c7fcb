"""Signals: a SIGTERM ends a task at once also after TensorFlow's strategy
took the signal; a Ctrl-C ends a program whose strategy waits for a missing
peer; a SIGTERM to a pytest session (plain or xdist) leaves no process, no
cluster directory and no listening port."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import cluster_tasks as tasks
import pytest
from cluster_checks import descendants
from cluster_checks import listening
from cluster_checks import wait_for
from cluster_checks import wait_gone
from support.load import bound

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import ClusterTaskError
from compat_distribute.testing.cluster import local_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.multi_worker(2)
def test_a_sigterm_ends_a_task_at_once_after_its_strategy_is_built():
    c = local_cluster(2, timeout=60).start()
    try:
        # Building MultiWorkerMirroredStrategy gives SIGTERM to TensorFlow's
        # preemption notifier, which only records it; the task takes it back.
        assert [f["num_replicas_in_sync"] for f in c.run(tasks.strategy_facts)] == [2, 2]
        pid = c.pids[1]
        start = time.monotonic()
        c.kill_task("worker", 1, signal.SIGTERM)
        assert time.monotonic() - start < bound(1.0)
        assert c.output("worker", 1).splitlines()[-1] == f"pid {pid} got SIGTERM: it ends now."
        c.stop()
        # A strategy the function builds itself, then a SIGTERM during the run.
        c.start()
        ended = []

        def terminate():
            wait_for(lambda: "strategy built" in c.output("worker", 0), 60)
            start = time.monotonic()
            c.kill_task("worker", 0, signal.SIGTERM)
            ended.append(time.monotonic() - start)

        killer = threading.Thread(target=terminate)
        killer.start()
        with pytest.raises(ClusterTaskError) as raised:
            c.run(tasks.build_strategy_then_sleep, 60)
        killer.join()
        assert ended and ended[0] < 1.0, ended
        assert str(raised.value).startswith(
            "local_cluster: worker 0 ended on SIGTERM (exit code 143) (kill_task) during "
            "run(cluster_tasks:build_strategy_then_sleep). The cluster was torn down."
        )
    finally:
        c.stop()


_WAITS_FOR_A_PEER = """\
import json, os, socket
ports = []
for _ in range(2):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                      "task": {"type": "worker", "index": 0}})
import compat_distribute
print("building", flush=True)
compat_distribute.MultiWorkerMirroredStrategy()  # worker 1 never starts
print("built", flush=True)
"""


def test_a_program_whose_strategy_waits_for_a_missing_peer_ends_on_ctrl_c(tmp_path):
    program = subprocess.Popen(
        [sys.executable, "-c", _WAITS_FOR_A_PEER],
        cwd=tmp_path,
        # TensorFlow's log says when it waits for the peer.
        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives a program
    )
    err = []
    reader = threading.Thread(target=lambda: err.extend(program.stderr), daemon=True)
    reader.start()
    try:
        assert program.stdout.readline() == "building\n"
        # TensorFlow waits for worker 1 in its coordination service, holding the interpreter.
        assert wait_for(lambda: any("Coordination agent has successfully connected" in line for line in err), 120)
        time.sleep(0.5)
        start = time.monotonic()
        os.killpg(program.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the group
        out = program.stdout.read()
        program.wait(deadlines.scaled(30))
        reader.join(10)
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()
    assert time.monotonic() - start < bound(3.0)
    assert out == "" and program.returncode == -signal.SIGKILL
    assert [line.rstrip("\n") for line in err if line.startswith("compat_distribute")] == [
        "compat_distribute: error: MultiWorkerMirroredStrategy() in task worker 0 was "
        "interrupted (Ctrl-C) while it waited for the other tasks of its cluster; TensorFlow "
        "does not return to Python before they join, so the process is killed now (SIGKILL)."
    ]


_HOLDS_A_CLUSTER = """\
import json, os, time
import pytest
from compat_distribute.testing import cluster


def replicas():  # Building the strategy starts each task's gRPC server.
    return cluster.worker_strategy().num_replicas_in_sync


@pytest.mark.multi_worker(2)
@pytest.mark.parametrize("index", range({tests}))
def test_holds_a_cluster(local_cluster, index):
    assert local_cluster.run(replicas) == [2, 2]
    ready = os.path.join(os.environ["READY_DIR"], str(index))
    ports = [int(a.rsplit(":", 1)[1]) for a in local_cluster.cluster_spec["worker"]]
    with open(ready + ".tmp", "w") as f:
        json.dump([local_cluster.directory, local_cluster.pids[0], ports], f)
    os.rename(ready + ".tmp", ready)
    time.sleep(300)
"""


@pytest.mark.multi_worker(4)
@pytest.mark.parametrize("workers", [0, 2], ids=["plain", "xdist-2"])
def test_a_sigterm_to_a_pytest_session_leaves_no_process_and_no_directory(tmp_path, workers):
    project, temp, ready = (tmp_path / name for name in ("project", "tmp", "ready"))
    for folder in (project, temp, ready):
        folder.mkdir()
    tests = max(workers, 1)
    (project / "test_holds.py").write_text(_HOLDS_A_CLUSTER.replace("{tests}", str(tests)))
    dist = ["-n", str(workers)] if workers else ["-p", "no:xdist"]
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *dist, "test_holds.py"],
        cwd=project,
        env=dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(temp), READY_DIR=str(ready)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        def written():  # A test's file is written as N.tmp, then renamed N: only N is ready.
            return [name for name in os.listdir(ready) if not name.endswith(".tmp")]

        assert wait_for(lambda: len(written()) == tests, 240), os.listdir(ready)
        held = [json.loads((ready / name).read_text()) for name in written()]
        directories = [directory for directory, _, _ in held]
        assert all(os.path.isdir(d) for d in directories)
        # Each cluster's gRPC servers listen, seen from inside its network.
        ports = {port for _, _, cluster_ports in held for port in cluster_ports}
        assert {port for _, pid, _ in held for port in listening(ports, pid)} == ports
        tree = descendants(session.pid) | {session.pid}
        assert len(tree) >= 1 + tests * 3  # The session, and per cluster 2 tasks and a zygote.
        start = time.monotonic()
        session.send_signal(signal.SIGTERM)
        assert session.wait(deadlines.scaled(30)) == -signal.SIGTERM
        assert wait_gone(tree, 15) == []
        elapsed = time.monotonic() - start
    finally:
        if session.poll() is None:
            os.killpg(session.pid, signal.SIGKILL)
            session.wait()
    assert elapsed < bound(10.0), elapsed
    assert not any(os.path.exists(d) for d in directories)
    assert [n for n in os.listdir(temp) if n.startswith("local_cluster-")] == []
    assert listening(ports) == {}
