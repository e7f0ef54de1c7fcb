"""A launch's zygote: it imports TensorFlow once and forks the tasks; it
refuses to fork once TensorFlow's runtime is initialised in it; its death
fails the launch naming it and leaves nothing; tasks whose import-time
environment differs, and COMPAT_DISTRIBUTE_ZYGOTE=0, get fresh processes."""

import json
import os
import signal
import threading

import cluster_tasks as tasks
import pytest
from cluster_checks import assert_no_leaks
from cluster_checks import descendants
from cluster_checks import running
from cluster_checks import wait_for
from cluster_checks import wait_gone

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import ClusterError
from compat_distribute.testing.cluster import LaunchHooks
from compat_distribute.testing.cluster import TaskSpec
from compat_distribute.testing.cluster import launcher as launcher_lib
from compat_distribute.testing.cluster import local_cluster
from compat_distribute.testing.cluster import zygote as zygote_lib

pytestmark = pytest.mark.skipif(
    not hasattr(os, "pidfd_open"), reason="the zygote needs os.pidfd_open (Linux)"
)


def _parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _recorder():
    launched = []
    return launched, LaunchHooks(on_launch=lambda name, pid: launched.append((name, pid)))


@pytest.mark.multi_worker(2)
@pytest.mark.parametrize("zygote", ["1", "0"])
def test_tasks_are_forked_by_one_zygote_unless_it_is_switched_off(temp_dir, monkeypatch, zygote):
    monkeypatch.setenv("COMPAT_DISTRIBUTE_ZYGOTE", zygote)
    launched, hooks = _recorder()
    with local_cluster(2, timeout=60, hooks=hooks) as c:
        pids, zygote_pid = c.pids, c.zygote_pid
        parents = [_parent(p) for p in pids]
        zygote_parent = _parent(zygote_pid) if zygote_pid else None
        infos = c.run(tasks.task_info, "forked?")
        tmpdirs = c.run(tasks.temp_dir_of_task)
    assert [i["pid"] for i in infos] == pids
    assert [i["task"] for i in infos] == [("worker", 0), ("worker", 1)]
    # Each forked task has its own TMPDIR and TF_CONFIG, read after the fork.
    assert [os.path.basename(t) for t in tmpdirs] == ["worker-0.tmp", "worker-1.tmp"]
    assert [json.loads(i["tf_config"])["task"]["index"] for i in infos] == [0, 1]
    if zygote == "1":
        assert launched == [("zygote", zygote_pid), ("worker 0", pids[0]), ("worker 1", pids[1])]
        assert parents == [zygote_pid, zygote_pid] and zygote_parent == os.getpid()
    else:
        assert zygote_pid is None and parents == [os.getpid()] * 2
        assert launched == [("worker 0", pids[0]), ("worker 1", pids[1])]
    assert_no_leaks([pid for _, pid in launched])
    assert os.listdir(temp_dir) == []


@pytest.mark.multi_worker(2)
def test_a_task_started_alone_first_is_forked_and_so_are_the_rest(temp_dir, monkeypatch):
    monkeypatch.setenv("COMPAT_DISTRIBUTE_ZYGOTE", "1")
    launched, hooks = _recorder()
    c = local_cluster(2, timeout=60, hooks=hooks)
    try:
        c.start_task("worker", 1)
        zygote_pid = c.zygote_pid
        assert zygote_pid is not None and c.pids[0] is None
        c.start()
        pids = c.pids
        assert [_parent(p) for p in pids] == [zygote_pid, zygote_pid]
        assert c.run(tasks.all_reduce_sum, 1.0) == [[2.0], [2.0]]
    finally:
        c.stop()
    assert launched == [("zygote", zygote_pid), ("worker 1", pids[1]), ("worker 0", pids[0])]
    assert_no_leaks([pid for _, pid in launched])


@pytest.mark.parametrize("value", ["2", "fork"])
def test_a_bad_switch_is_refused_naming_the_accepted_values(value):
    with pytest.raises(ValueError) as raised:
        zygote_lib.wanted({"COMPAT_DISTRIBUTE_ZYGOTE": value})
    assert str(raised.value) == (
        f"COMPAT_DISTRIBUTE_ZYGOTE must be 1/0, true/false, yes/no or on/off; got {value!r}. "
        f"It makes local_cluster and fake TPU pods fork their tasks from one process that "
        f"imported TensorFlow (1), or start each task as a fresh process (0). Set it so, or "
        f"unset it for the default (1)."
    )


def _launcher(launched):
    hooks = LaunchHooks(on_launch=lambda name, pid: launched.append(pid))
    return launcher_lib.Launcher(
        network="host", start_timeout=60, env={}, hooks=hooks, who="", opt_out=""
    )


def _spec(launcher, task_id, main="cluster_tasks:serve_until_exit", **env):
    name = f"worker {task_id}"
    env = dict(launcher.process_env(name), TF_CONFIG="{}", **env)
    return TaskSpec("worker", task_id, main=main, env=env)


def test_a_task_whose_import_time_environment_differs_gets_a_fresh_process(temp_dir):
    launched = []
    launcher = _launcher(launched)
    with launcher.launching():
        started = launcher.spawn(
            [
                _spec(launcher, 0),  # TF_CONFIG and TMPDIR are read late: forked
                _spec(launcher, 1),
                _spec(launcher, 2, TF_CPP_MIN_LOG_LEVEL="0"),  # read at import: fresh
                _spec(launcher, 3, SERVER_MARK="marked"),  # any other difference: fresh
            ]
        )
        launcher.wait_ready()
        zygote = launcher.zygote_pid
        assert zygote is not None and launched[0] == zygote
        assert [_parent(t.pid) for t in started] == [zygote, zygote, os.getpid(), os.getpid()]
        # A forked task still ends as a fresh one does: SIGTERM on its group, status 143.
        started[0].signal_group(signal.SIGTERM)
        assert started[0].wait(deadlines.scaled(10)) == 143
        assert started[0].output().splitlines()[-1] == (
            f"pid {started[0].pid} got SIGTERM: it ends now."
        )
        launcher_lib.stop_all(started[1:], graceful=True)
        assert [t.exitcode() for t in started[2:]] == [7, 7]  # They answered Exit.
    launcher.stop(graceful=True)
    assert not any(running(p) for p in launched)
    assert os.listdir(temp_dir) == []


def test_the_zygote_refuses_to_fork_once_tensorflow_runs_in_it(temp_dir):
    launched = []
    launcher = _launcher(launched)
    before = descendants()
    main = "cluster_eager_import:serve_until_exit"
    with pytest.raises(ClusterError) as raised:
        # Importing the main's module in the zygote ran an op: an eager context exists.
        with launcher.launching():
            launcher.spawn([_spec(launcher, 0, main), _spec(launcher, 1, main)])
    zygote = launched[0]
    assert str(raised.value) == (
        f"local_cluster: the zygote (pid {zygote}, which imports TensorFlow once and forks "
        f"the tasks) refused to fork worker 0: TensorFlow's runtime is initialised in it (an "
        f"eager context exists: an op ran or a context was made, e.g. at the import of a "
        f"main's module), and a fork would copy that runtime without its threads. Keep "
        f"TensorFlow uninitialised at the import of the tasks' main modules (no op, no "
        f"context). Set COMPAT_DISTRIBUTE_ZYGOTE=0 to start each task as a fresh process "
        f"instead."
    )
    assert launched == [zygote] and not launcher.running
    assert descendants() - before == set()
    assert os.listdir(temp_dir) == []


def test_the_zygote_checks_its_own_threads_before_a_fork(run_python):
    result = run_python(
        "import threading, time\n"
        "from compat_distribute.testing.cluster import zygote\n"
        "print(zygote.unsafe_to_fork())\n"
        "threading.Thread(target=time.sleep, args=(5,), name='sleeper', daemon=True).start()\n"
        "print(zygote.unsafe_to_fork())\n",
        timeout=60,
    )
    assert result.stdout.splitlines() == [
        "None",
        "it runs 2 Python threads (MainThread, sleeper), and a fork keeps only one",
    ]


@pytest.mark.multi_worker(2)
@pytest.mark.parametrize(
    "killed_when, when",
    [("worker 0", "while forking worker 1"), ("worker 1", "during start-up")],
)
def test_a_zygote_killed_mid_launch_fails_it_naming_the_zygote_and_leaves_nothing(
    temp_dir, killed_when, when
):
    launched = []

    def on_launch(name, pid):
        launched.append((name, pid))
        if name == killed_when:
            zygote = dict(launched)["zygote"]
            os.kill(zygote, signal.SIGKILL)
            # Dead, not dying: a process ends some milliseconds after SIGKILL,
            # and a forked task may say Ready meanwhile.
            assert wait_gone([zygote], 10) == []

    c = local_cluster(2, timeout=60, hooks=LaunchHooks(on_launch=on_launch))
    with pytest.raises(ClusterError) as raised:
        c.start()
    zygote = dict(launched)["zygote"]
    message = str(raised.value)
    assert message.startswith(
        f"local_cluster: the zygote (pid {zygote}, which imports TensorFlow once and forks the "
        f"tasks) was killed by SIGKILL {when}; the tasks it forked die with it. Set "
        f"COMPAT_DISTRIBUTE_ZYGOTE=0 to start each task as a fresh process instead.\n"
        f"Output of the zygote (last lines):\n"
    ), message
    assert not c.running and c.pids == [None, None]
    assert_no_leaks([pid for _, pid in launched])
    assert os.listdir(temp_dir) == []
    # A zygote is no task: it is not in the error's task fields.
    assert not hasattr(raised.value, "task_type")


@pytest.mark.multi_worker(2)
def test_a_zygote_killed_during_a_run_is_named_and_leaves_nothing(temp_dir):
    launched, hooks = _recorder()
    c = local_cluster(2, timeout=60, hooks=hooks).start()
    zygote = c.zygote_pid
    killer = threading.Timer(1.0, os.kill, (zygote, signal.SIGKILL))
    killer.start()
    try:
        with pytest.raises(ClusterError) as raised:
            c.run(tasks.sleep_forever)
    finally:
        killer.join()
    assert str(raised.value).startswith(
        f"local_cluster: the zygote (pid {zygote}, which imports TensorFlow once and forks the "
        f"tasks) was killed by SIGKILL during run(cluster_tasks:sleep_forever); the tasks it "
        f"forked die with it."
    )
    assert not c.running
    assert_no_leaks([pid for _, pid in launched])
    # The tasks' logs are kept, and the error says where.
    assert str(raised.value).endswith(f"\nEvery task's log is kept in {raised.value.logs}")
    assert os.listdir(temp_dir) == [os.path.basename(raised.value.logs)]


@pytest.mark.multi_worker(2)
def test_a_pod_hosts_zygote_that_dies_is_named_with_each_host(temp_dir):
    from compat_distribute.testing.cluster import ClusterTaskError
    from compat_distribute.testing.cluster.host import LocalServers

    servers = LocalServers(2, devices_per_host=1, network="host", owner="a test's servers").start()
    try:
        zygote, hosts = servers.zygote_pid, servers.pids
        assert [_parent(p) for p in hosts] == [zygote] * 2
        os.kill(zygote, signal.SIGKILL)
        assert wait_for(lambda: len(servers.faults()) >= 2, 10)
        because = f"as the zygote that forked it (pid {zygote}) was killed by SIGKILL"
        assert servers.faults() == [
            (i, f"worker {i}, pid {hosts[i]}, was killed by SIGKILL, {because}") for i in (0, 1)
        ]
        with pytest.raises(ClusterTaskError) as raised:
            servers.check()
        assert str(raised.value).startswith(
            f"a test's servers: worker 0 (pid {hosts[0]}) was killed by SIGKILL, {because}.\n"
        )
    finally:
        servers.stop()
    assert_no_leaks(hosts + [zygote])
    assert os.listdir(temp_dir) == []


def test_the_flag_that_makes_a_zygote_is_what_bootstrap_reads():
    assert zygote_lib.FLAG == "--zygote"
