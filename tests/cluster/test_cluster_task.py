"""The task launcher on its own: a task runs any main that speaks the protocol,
such as a long-lived server, and leaves nothing behind."""

import os
import signal
import time

import pytest
from cluster_checks import running

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import LaunchHooks
from compat_distribute.testing.cluster import TaskSpec
from compat_distribute.testing.cluster import launcher as launcher_lib
from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster import task as task_lib
from support.load import bound


def _launcher(hooks=None):
    return launcher_lib.Launcher(
        network="host", start_timeout=60, env={}, hooks=hooks or LaunchHooks(), who="", opt_out=""
    )


def _spawn(launcher, main, argv=(), **env):
    spec = TaskSpec("worker", 0, main=main, argv=argv, env=dict(launcher.process_env("worker 0"), **env))
    (task,) = launcher.spawn([spec])
    return task


def test_a_task_runs_a_long_lived_main_until_told_to_exit(temp_dir):
    launched = []
    launcher = _launcher(LaunchHooks(on_launch=lambda name, pid: launched.append((name, pid))))
    with launcher.launching():
        server = _spawn(launcher, "cluster_tasks:serve_until_exit", ("--port", "1234"), SERVER_MARK="marked")
        assert launched == [("worker 0", server.pid)]
        assert server.conn.poll(deadlines.scaled(60)) and server.conn.recv() == protocol.Alive(server.pid)
        # Alive and Ready are typed messages: the main was found by name.
        assert server.conn.poll(deadlines.scaled(60)) and server.conn.recv() == protocol.Ready(server.pid)
        server.ask_to_exit()
        assert server.wait(deadlines.scaled(10)) == 7
        assert server.output().splitlines()[-2:] == ["serving --port 1234 marked", "exiting"]
    launcher.stop(graceful=False)
    assert not running(server.pid)
    assert os.listdir(temp_dir) == []


# -- Stopping: Exit, then SIGTERM, then SIGKILL --------------------------------


def _deaf_task(*flags):
    """LaunchHooks that run `cluster_tasks:ignore_exit` in place of the task's main."""

    def command(spec, argv):
        main = argv.index(spec.main)
        return argv[:main] + ["cluster_tasks:ignore_exit", *flags]

    return LaunchHooks(command=command)


def _started(hooks):
    launcher = _launcher(hooks)
    with launcher.launching():
        task = _spawn(launcher, "cluster_tasks:serve_until_exit")
        launcher.wait_ready()
    return launcher, task


@pytest.mark.parametrize(
    "graceful, flags",
    [(True, ()), (False, ()), (True, ("--blocked-in-c",))],
    ids=["stop", "teardown-after-a-fault", "stop-while-blocked-in-c"],
)
def test_a_task_that_ignores_exit_ends_on_sigterm(temp_dir, graceful, flags):
    launcher, task = _started(_deaf_task(*flags))
    start = time.monotonic()
    try:
        launcher_lib.stop_all([task], graceful=graceful)
        elapsed = time.monotonic() - start
        assert task.exitcode() == report.SIGTERM_EXIT_CODE == 143
        assert report.exit_reason(task.exitcode()) == "ended on SIGTERM (exit code 143)"
        assert task.output().splitlines()[-2:] == [
            "ready, deaf to Exit",
            f"pid {task.pid} got SIGTERM: it ends now.",
        ]
    finally:
        launcher.stop(graceful=False)
    # Asked to exit first (only when stopping), then ended at once on SIGTERM.
    grace = launcher_lib.EXIT_GRACE_S if graceful else 0.0
    assert grace <= elapsed < grace + bound(1.0), elapsed
    assert not running(task.pid)
    assert os.listdir(temp_dir) == []


def test_a_task_that_ignores_sigterm_too_is_killed_after_the_grace_periods(temp_dir):
    launcher, task = _started(_deaf_task("--ignore-sigterm"))
    start = time.monotonic()
    try:
        launcher_lib.stop_all([task], graceful=True)
        elapsed = time.monotonic() - start
        assert task.exitcode() == -signal.SIGKILL
        assert task.output().splitlines()[-1] == "ready, deaf to Exit"
    finally:
        launcher.stop(graceful=False)
    grace = launcher_lib.EXIT_GRACE_S + launcher_lib.TERM_GRACE_S
    assert grace <= elapsed < grace + bound(1.0), elapsed
    assert not running(task.pid)
    assert os.listdir(temp_dir) == []


def test_a_task_that_exits_when_asked_gets_no_signal(temp_dir):
    launcher, task = _started(LaunchHooks())
    start = time.monotonic()
    try:
        launcher_lib.stop_all([task], graceful=True)
        elapsed = time.monotonic() - start
        # It answered Exit (closed its end), and its process group was killed
        # while it returned 7: no SIGTERM, no waiting for the grace periods.
        assert task.exitcode() in (7, -signal.SIGKILL)
        assert "SIGTERM" not in task.output()
    finally:
        launcher.stop(graceful=False)
    assert elapsed < bound(1.0), elapsed


def test_the_watchdog_frames_left_out_of_stack_dumps_are_the_bootstraps():
    from compat_distribute.testing.cluster import bootstrap
    from compat_distribute.testing.cluster import sigterm

    assert task_lib.WATCHDOG_FRAMES == ("_exit_when_orphaned", "_end_on_sigterm")
    assert callable(bootstrap._exit_when_orphaned)
    assert callable(sigterm._Ends._end_on_sigterm)
