"""Control of one task: kill it (a signal of choice) and start it again with
the same address and TF_CONFIG, start one task alone, auto_restart, and a job
that ends with its chief; and a watcher that notices a task's death between
runs."""

import json
import os
import signal
import threading
import time

import cluster_tasks as tasks
import pytest
from cluster_checks import assert_no_leaks
from cluster_checks import wait_for
from support.load import bound

from compat_distribute.testing.cluster import ClusterError
from compat_distribute.testing.cluster import ClusterTaskError
from compat_distribute.testing.cluster import local_cluster
from compat_distribute.testing.cluster import watcher as watcher_lib


@pytest.fixture(scope="module", name="pair")
def pair_fixture():
    c = local_cluster(2, timeout=60).start()
    yield c
    c.stop()


@pytest.mark.multi_worker(2)
@pytest.mark.parametrize("sig, ended", [(signal.SIGKILL, "was killed by SIGKILL"), (signal.SIGTERM, "ended on SIGTERM (exit code 143)")])
def test_a_killed_task_stays_down_until_started_again_at_its_address(pair, sig, ended):
    pair.start()
    before = pair.run(tasks.task_info, "before")
    old_pid = pair.pids[1]
    pair.kill_task("worker", 1, sig)
    assert pair.pids == [before[0]["pid"], None] and not pair.running
    with pytest.raises(ClusterError) as again:
        pair.kill_task("worker", 1)
    assert str(again.value) == f"local_cluster: worker 1 does not run ({ended}, by kill_task({sig.name})): nothing to kill."
    with pytest.raises(ClusterError) as raised:
        pair.run(tasks.task_info, "down")
    assert str(raised.value) == (
        f"local_cluster: run(cluster_tasks:task_info) needs worker 1 ({ended}, by "
        f"kill_task({sig.name})), which does not run. Call start_task('worker', 1) (or "
        f"start()) first, or run_on the tasks that run."
    )
    # The others go on.
    assert [r["task"] for r in pair.run_on(("worker", 0), tasks.task_info, "one")] == [("worker", 0)]
    pair.start_task("worker", 1)
    after = pair.run(tasks.task_info, "after")
    assert pair.running and after[1]["pid"] == pair.pids[1] != old_pid
    assert after[0]["pid"] == before[0]["pid"]  # Left alone.
    # The same address and TF_CONFIG.
    assert [r["tf_config"] for r in after] == [r["tf_config"] for r in before]
    # Its log goes on from the earlier process's.
    ending = f"pid {old_pid} got SIGTERM: it ends now."
    assert (ending in pair.output("worker", 1)) == (sig == signal.SIGTERM)


@pytest.mark.multi_worker(2)
def test_kill_task_waits_out_a_watcher_that_holds_the_cluster_and_returns_with_the_task_down(monkeypatch, temp_dir):
    # The watcher is held inside its look at the tasks, as a loaded machine
    # can hold it; kill_task must not return before it has marked the task down.
    in_watcher, go_on = threading.Event(), threading.Event()
    real_init = watcher_lib.Watcher.__init__

    def held_watcher(self, lock, notice, streamer):
        def notice_when_let_go():
            in_watcher.set()
            go_on.wait(60)
            notice()

        real_init(self, lock, notice_when_let_go, streamer)

    monkeypatch.setattr(watcher_lib.Watcher, "__init__", held_watcher)
    c = local_cluster(2, timeout=60)
    try:
        c.start()
        pids = c.pids
        assert in_watcher.wait(bound(10))
        killer = threading.Thread(target=c.kill_task, args=("worker", 1))
        killer.start()
        killer.join(0.5)
        assert killer.is_alive()
        go_on.set()
        killer.join(bound(10))
        assert not killer.is_alive() and c.pids == [pids[0], None] and not c.running
        c.start_task("worker", 1)
        assert c.run(tasks.all_reduce_sum, 1.0) == [[2.0], [2.0]]
        pids.append(c.pids[1])
    finally:
        go_on.set()
        c.stop()
    assert_no_leaks(pids)


@pytest.mark.multi_worker(2)
def test_collectives_after_one_task_started_again_fail_saying_to_start_every_task(pair):
    pair.start()
    assert pair.run(tasks.all_reduce_sum, 1.0) == [[2.0], [2.0]]
    pair.kill_task("worker", 1)
    pair.start_task("worker", 1)
    with pytest.raises(ClusterTaskError) as raised:
        pair.run(tasks.all_reduce_sum, 1.0)
    message = str(raised.value)
    assert message.startswith("local_cluster: worker 0 raised AbortedError: ")
    assert "/job:worker/replica:0/task:1 unexpectedly tried to connect with a different incarnation" in message
    after = message.split(" The cluster was torn down.\n", 1)[1]
    assert after.split("\n")[0] == (
        "A task was started again (start_task, or auto_restart) while its peers ran on: "
        "TensorFlow's collectives refuse it until every task starts again. Call stop() and "
        "start() (with auto_restart=True, each task whose call raises is started again)."
    )
    pair.start()  # Every task again: the collectives meet.
    assert pair.run(tasks.all_reduce_sum, 1.0) == [[2.0], [2.0]]


@pytest.mark.multi_worker(2)
def test_one_task_starts_alone_and_the_rest_with_start(temp_dir):
    c = local_cluster(2, timeout=60)
    try:
        for _ in ("before any start", "beside the one started"):
            with pytest.raises(ClusterError) as refused:
                c.kill_task("worker", 0)
            assert str(refused.value) == "local_cluster: worker 0 does not run (not started): nothing to kill."
            c.start_task("worker", 1)
        assert c.pids[0] is None and c.pids[1] is not None and not c.running
        (alone,) = c.run_on(("worker", 1), tasks.task_info, "alone")
        # Its TF_CONFIG names the whole cluster.
        assert json.loads(alone["tf_config"])["cluster"] == {"worker": list(c.cluster_spec["worker"])}
        with pytest.raises(ClusterError, match=r"needs worker 0 \(not started\), which does not run"):
            c.run(tasks.task_info, "both")
        c.start()
        assert c.running and c.pids[1] == alone["pid"]
        assert c.run(tasks.all_reduce_sum, 2.0) == [[4.0], [4.0]]
        pids = c.pids
    finally:
        c.stop()
    assert_no_leaks(pids)


@pytest.mark.multi_worker(2)
def test_kill_task_refuses_what_it_cannot_do(pair):
    pair.start()
    with pytest.raises(ValueError, match=r"task_type, task_id must name a task of this cluster; got 'worker', 2 \(int\)\. Its tasks: \('worker', 0\), \('worker', 1\)\."):
        pair.kill_task("worker", 2)
    with pytest.raises(ValueError, match=r"sig must be a signal that ends a process, such as signal.SIGKILL \(the default\) or signal.SIGTERM; got <Signals.SIGSTOP: 19>"):
        pair.kill_task("worker", 0, signal.SIGSTOP)
    with pytest.raises(ValueError, match=r"tasks: 'ps' \(str\) is no job or task of this cluster\. Name a job \('worker'\), a task as a \(task_type, task_id\) pair such as \('worker', 0\), or a list of those\."):
        pair.run_on("ps", tasks.task_info, "x")
    assert pair.running


@pytest.mark.multi_worker(2)
def test_the_watcher_names_a_task_that_died_between_runs(pair, capfd):
    pair.start()
    pids = pair.pids
    os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    assert wait_for(lambda: not pair.running, 5)
    said = []
    assert wait_for(lambda: said.append(capfd.readouterr().err) or "between runs" in "".join(said), 5)
    assert time.monotonic() - start < bound(3.0)
    assert "".join(said) == (
        f"local_cluster: worker 1 (pid {pids[1]}) was killed by SIGKILL between runs; the next "
        f"run raises ClusterTaskError naming it.\n"
    )
    with pytest.raises(ClusterTaskError) as raised:
        pair.run(tasks.task_info, "after")
    error = raised.value
    assert (error.task_type, error.task_id, error.exitcode) == ("worker", 1, -signal.SIGKILL)
    assert str(error).startswith(
        f"local_cluster: worker 1 (pid {pids[1]}) was killed by SIGKILL after the last run, so "
        f"run(cluster_tasks:task_info) could not start. The cluster was torn down."
    )
    assert_no_leaks(pids)


@pytest.mark.multi_worker(2)
def test_a_task_that_answered_and_then_died_fails_the_call_at_once(pair):
    pair.start()
    pids = pair.pids
    start = time.monotonic()
    with pytest.raises(ClusterTaskError) as raised:
        pair.run(tasks.answer_then_die_on_worker_1, 30)
    # Noticed while worker 0 still sleeps, not at its end (30 s) or the timeout (60 s).
    assert time.monotonic() - start < bound(10)
    assert (raised.value.task_type, raised.value.task_id, raised.value.exitcode) == ("worker", 1, -9)
    assert str(raised.value).startswith(
        "local_cluster: worker 1 was killed by SIGKILL during "
        "run(cluster_tasks:answer_then_die_on_worker_1). The cluster was torn down."
    )
    assert_no_leaks(pids)


@pytest.mark.multi_worker(2)
def test_a_task_killed_just_before_a_run_is_named_not_a_broken_pipe(pair):
    pair.start()
    pids = pair.pids
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(ClusterTaskError) as raised:
        pair.run(tasks.task_info, "now")
    assert (raised.value.task_type, raised.value.task_id, raised.value.exitcode) == ("worker", 1, -9)
    assert "worker 1" in str(raised.value).splitlines()[0] and "killed by SIGKILL" in str(raised.value).splitlines()[0]
    assert_no_leaks(pids)


@pytest.mark.multi_worker(2)
def test_auto_restart_runs_the_call_again_in_a_fresh_task(tmp_path, capfd):
    c = local_cluster(2, timeout=60, auto_restart=True).start()
    try:
        first = c.pids
        # Worker 1 exits with code 3 on its first try, then answers.
        assert c.run(tasks.exit_on_worker_1_once, str(tmp_path / "exited")) == [("worker", 0), ("worker", 1)]
        second = c.pids
        assert second[0] == first[0] and second[1] != first[1]
        assert f"local_cluster: worker 1 (pid {first[1]}) exited with code 3; auto_restart started it again as pid {second[1]}." in capfd.readouterr().err
        # A raise counts too: the task is replaced, and the call runs again.
        assert c.run(tasks.raise_on_worker_1_once, str(tmp_path / "raised")) == [("worker", 0), ("worker", 1)]
        assert c.pids[1] != second[1]
        # Killed from another thread during a run: back, and the run goes on.
        third = c.pids
        killer = threading.Timer(1.0, c.kill_task, ("worker", 1))
        killer.start()
        assert c.run(tasks.sleep_then_task, 3.0) == [("worker", 0), ("worker", 1)]
        killer.join()
        assert c.running and c.pids[1] != third[1]
        # A task that fails every time fails the call after 3 restarts.
        with pytest.raises(ClusterTaskError, match=r"^local_cluster: worker 1 raised ValueError: always"):
            c.run(tasks.raise_on_worker_1, "always")
    finally:
        c.stop()
    # Once for the raise, once for the kill, three times for the task that always fails.
    assert capfd.readouterr().err.count("auto_restart started it again") == 5


@pytest.mark.multi_worker(2)
def test_the_job_ends_with_its_chief(capfd):
    c = local_cluster(1, has_chief=True, timeout=60, chief_ends_job=True).start()
    pids = c.pids
    with pytest.raises(ClusterError) as raised:
        c.run(tasks.exit_on_chief, 0)
    assert str(raised.value) == (
        "local_cluster: chief 0 exited with code 0, and chief_ends_job=True ends the job with "
        "it: every task was stopped during run(cluster_tasks:exit_on_chief)."
    )
    assert not c.running
    assert_no_leaks(pids)
    with pytest.raises(ClusterError, match=r"this local_cluster was torn down when chief 0 exited with code 0"):
        c.run(tasks.task_info, "after")
    # Between runs too.
    c.start()
    pids = c.pids
    c.kill_task("chief", 0)
    assert wait_for(lambda: not any(c.pids), 10)
    assert_no_leaks(pids)
    with pytest.raises(ClusterError, match=r"torn down when chief 0 was killed by SIGKILL, and chief_ends_job=True ends the job"):
        c.run(tasks.task_info, "after")
