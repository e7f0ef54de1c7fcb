"""local_cluster's faults: each test asserts the error text, the task named, a
time bound and an empty process table and temp dir afterwards. Each starts its
own cluster, since a fault tears its cluster down."""

import re
import socket
import sys
import time

import cluster_tasks as tasks
import pytest
from cluster_checks import HOST_NETWORK
from cluster_checks import assert_no_leaks

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import ClusterError
from compat_distribute.testing.cluster import ClusterTaskError
from compat_distribute.testing.cluster import ClusterTimeoutError
from compat_distribute.testing.cluster import LaunchHooks
from compat_distribute.testing.cluster import local_cluster
from compat_distribute.testing.cluster.ports import pick_unused_port
from support.load import bound


@pytest.mark.multi_worker(2)
def test_exception_names_the_task_then_cluster_refuses_until_restarted():
    c = local_cluster(2, timeout=30).start()
    pids = c.pids
    namespace = c.run(tasks.task_info, "before")[0]["network_namespace"]
    start = time.monotonic()
    with pytest.raises(ClusterTaskError) as info:
        c.run(tasks.raise_on_worker_1, "broken on purpose")
    elapsed = time.monotonic() - start
    error = info.value
    assert (error.task_type, error.task_id, error.exitcode) == ("worker", 1, None)
    text = str(error)
    assert text.startswith(
        "local_cluster: worker 1 raised ValueError: broken on purpose. The cluster was torn down."
    )
    assert "raise ValueError(message)" in text and "in raise_on_worker_1" in text
    assert "about to fail" in error.output_tail
    assert isinstance(error.__cause__, ValueError) and str(error.__cause__) == "broken on purpose"
    # The error is also the task's exception class: pytest.raises(ValueError) catches it.
    assert isinstance(error, ValueError) and type(error).__qualname__ == "ClusterTaskError[ValueError]"
    assert elapsed < bound(3.0), elapsed
    assert_no_leaks(pids, namespace)

    with pytest.raises(
        ClusterError, match=r"torn down after a fault \(local_cluster: worker 1 raised"
    ):
        c.run(tasks.task_info, "again")
    # start() launches fresh tasks.
    c.start()
    try:
        again = c.run(tasks.task_info, "again")
        assert [r["task"] for r in again] == [("worker", 0), ("worker", 1)]
        new_pids = c.pids
        assert set(new_pids).isdisjoint(pids)
        new_namespace = again[0]["network_namespace"]
        # A private network again (a fresh one: the old one is gone, checked above,
        # so the kernel may give the new one the same inode number).
        assert (new_namespace != HOST_NETWORK) == (c.network == "private")
        # TensorFlow's errors keep what they carry.
        import tensorflow as tf

        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            c.run(tasks.raise_tf_error_on_worker_1)
        assert raised.value.message == "shapes [2] and [3] differ"
        assert raised.value.error_code == tf.errors.INVALID_ARGUMENT
        assert str(raised.value).startswith(
            "local_cluster: worker 1 raised InvalidArgumentError: shapes [2] and [3] differ. "
            "The cluster was torn down."
        )
        c.start()
        new_pids += c.pids
        # A result that cannot reach this process is a fault of the task.
        with pytest.raises(
            ClusterTaskError,
            match=r"^local_cluster: worker [01] raised TypeError: the result of "
            r"cluster_tasks:return_a_lock does not pickle, so it cannot reach the caller: "
            r"TypeError: cannot pickle '_thread.lock' object. Return plain Python or NumPy "
            r"values \(call .numpy\(\) on tensors\)\. The cluster was torn down\.\n"
            r"worker [01] also raised TypeError: the result of cluster_tasks:return_a_lock",
        ):
            c.run(tasks.return_a_lock)
    finally:
        c.stop()
    assert_no_leaks(new_pids, new_namespace)
    with pytest.raises(ClusterError, match="not running: use `with local_cluster"):
        c.run(tasks.task_info, "stopped")


@pytest.mark.multi_worker(2)
def test_task_that_exits_fails_the_call_with_every_stack():
    c = local_cluster(2, timeout=30).start()
    pids = c.pids
    start = time.monotonic()
    with pytest.raises(ClusterTaskError) as info:
        c.run(tasks.exit_on_worker_1)
    elapsed = time.monotonic() - start
    error = info.value
    assert (error.task_type, error.task_id, error.exitcode) == ("worker", 1, 3)
    text = str(error)
    assert text.startswith(
        "local_cluster: worker 1 exited with code 3 during run(cluster_tasks:exit_on_worker_1). "
        "The cluster was torn down.\nStill running when the call failed: worker 0."
    )
    # Worker 0 was still sleeping: its stack says where.
    assert (
        "Python stacks of worker 0:" in text and "in exit_on_worker_1" in error.stacks["worker 0"]
    )
    assert "Python stacks of worker 1: none (exited with code 3)." in text
    assert elapsed < bound(5.0), elapsed
    assert_no_leaks(pids)


@pytest.mark.multi_worker(2)
def test_sys_exit_in_a_task_ends_its_process_with_that_status():
    c = local_cluster(2, timeout=30).start()
    pids = c.pids
    with pytest.raises(ClusterTaskError) as info:
        c.run(tasks.exit_with, 42)
    assert (info.value.task_type, info.value.task_id, info.value.exitcode) == ("worker", 1, 42)
    assert str(info.value).startswith(
        "local_cluster: worker 1 exited with code 42 during run(cluster_tasks:exit_with). The "
        "cluster was torn down."
    )
    assert_no_leaks(pids)


@pytest.mark.multi_worker(2)
def test_hang_times_out_with_every_stack():
    c = local_cluster(2, timeout=6).start()
    pids = c.pids
    start = time.monotonic()
    with pytest.raises(ClusterTimeoutError) as info:
        c.run(tasks.hang_worker_1_in_sleep)
    elapsed = time.monotonic() - start
    error = info.value
    assert str(error).startswith(
        "local_cluster: run(cluster_tasks:hang_worker_1_in_sleep) did not finish within "
        f"{deadlines.describe(6)} (timeout); still running: worker 0, worker 1. The cluster "
        "was torn down."
    )
    assert error.pending == ["worker 0", "worker 1"]
    # Worker 1 sleeps; worker 0 waits for it inside TensorFlow.
    assert "time.sleep" not in error.stacks["worker 1"]  # faulthandler shows frames, not source
    assert "in hang_worker_1_in_sleep" in error.stacks["worker 1"]
    assert "in all_reduce_sum" in error.stacks["worker 0"]
    assert deadlines.scaled(6) <= elapsed < deadlines.scaled(6) + bound(5), elapsed
    assert_no_leaks(pids)


@pytest.mark.multi_worker(2)
def test_port_taken_before_the_server_binds_is_retried_with_new_ports():
    # On the host network: a private one is fresh, so no port there is taken.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        occupied = squatter.getsockname()[1]
        launches = []

        def occupied_first(count):
            picked = [pick_unused_port() for _ in range(count)]
            if not launches:
                picked[0] = occupied
            launches.append(picked)
            return picked

        c = local_cluster(
            2, timeout=30, network="host", hooks=LaunchHooks(pick_ports=occupied_first)
        ).start()
        first_pids = c.pids
        try:
            assert c.network == "host"
            assert c.cluster_spec["worker"][0] == f"127.0.0.1:{occupied}"
            assert c.run(tasks.all_reduce_sum, 2.0) == [[4.0], [4.0]]
            assert len(launches) == 2
            assert occupied not in launches[1]
            assert c.cluster_spec["worker"] == tuple(f"127.0.0.1:{p}" for p in launches[1])
            assert set(c.pids).isdisjoint(first_pids)
            pids = first_pids + c.pids
            # Host network: this process reaches the servers (TF binds 0.0.0.0).
            for address in c.cluster_spec["worker"]:
                assert tasks.connect_to(address) == "ok"
            assert [r["network_namespace"] for r in c.run(tasks.task_info, "host")] == [HOST_NETWORK] * 2
        finally:
            c.stop()
    assert_no_leaks(pids)


@pytest.mark.multi_worker(2)
def test_peer_that_never_starts_fails_start_up():
    launched = []

    def silent_worker_1(spec, argv):
        if spec.name == "worker 1":
            return [sys.executable, "-c", "import time; time.sleep(600)"]
        return argv

    hooks = LaunchHooks(command=silent_worker_1, on_launch=lambda name, pid: launched.append(pid))
    c = local_cluster(2, timeout=30, start_timeout=8, hooks=hooks)
    start = time.monotonic()
    with pytest.raises(ClusterTimeoutError) as info:
        c.start()
    elapsed = time.monotonic() - start
    error = info.value
    text = str(error)
    # On a busy machine worker 0 may still be importing TensorFlow too.
    assert re.match(
        r"local_cluster: (worker 0, )?worker 1 did not start within "
        + re.escape(deadlines.describe(8))
        + r" \(start_timeout\); the other tasks would wait for them forever, so the cluster was torn down.",
        text,
    )
    assert error.pending[-1] == "worker 1"
    assert "Python stacks of worker 1: none (never said hello)." in text
    # Worker 0 said hello at once: its stack shows where it is (importing or
    # idle) in its own main. faulthandler may say "Garbage-collecting" first.
    assert "Python stacks of worker 0:\n" in text
    (stack,) = [t for t in error.stacks["worker 0"].split("\n\n") if t.startswith("Current thread")]
    header, *lines = stack.splitlines()
    assert re.fullmatch(r"Current thread 0x[0-9a-f]+ \(most recent call first\):", header), stack
    # TensorFlow's C++ log may write a line of its own into the dump.
    frames = [line for line in lines if line.startswith("  ") and line != "  Garbage-collecting"]
    assert frames[0].startswith("  File "), stack
    joined = "\n".join(frames)
    if frames[-1] == "  ...":  # faulthandler cuts at 100 frames: deep in importing TensorFlow.
        assert len(frames) == 101 and " in _find_and_load\n" in joined, stack
    else:  # Its own main, under the task's bootstrap.
        assert re.search(r'/cluster/worker\.py", line \d+ in main\n  File "[^"]*/cluster/bootstrap\.py"', joined), stack
    assert deadlines.scaled(8) <= elapsed < deadlines.scaled(8) + bound(4), elapsed
    assert not c.running
    assert len(launched) == 2
    assert_no_leaks(launched)


@pytest.mark.multi_worker(2)
def test_stopped_worker_is_named_first_when_the_call_times_out():
    c = local_cluster(2, timeout=6).start()
    pids = c.pids
    start = time.monotonic()
    with pytest.raises(ClusterTimeoutError) as info:
        c.run(tasks.stop_worker_1_then_all_reduce)
    elapsed = time.monotonic() - start
    error = info.value
    text = str(error)
    # Worker 0 waits for worker 1 inside TensorFlow, but worker 1 is the cause.
    assert text.startswith(
        "local_cluster: run(cluster_tasks:stop_worker_1_then_all_reduce) did not finish "
        f"within {deadlines.describe(6)} (timeout); worker 1 is stopped (SIGSTOP, SIGTSTP or a debugger) and "
        "cannot answer; still running: worker 1, worker 0. The cluster was torn down."
    )
    assert error.stopped == ["worker 1"]
    assert error.pending == ["worker 1", "worker 0"]
    assert "Python stacks of worker 1: none (stopped: SIGSTOP, SIGTSTP or a debugger)." in text
    assert "in all_reduce_sum" in error.stacks["worker 0"]
    assert "worker 1" not in error.stacks
    assert deadlines.scaled(6) <= elapsed < deadlines.scaled(6) + bound(5), elapsed
    assert_no_leaks(pids)
