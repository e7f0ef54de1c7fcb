"""The task launcher on its own: a task runs any main that speaks the protocol,
such as a long-lived server, and leaves nothing behind."""

import os
import sys
import tempfile

import pytest
from cluster_checks import running

from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import task as task_lib
from compat_distribute.testing.cluster import workdir as workdir_lib
from compat_distribute.testing.cluster.hooks import LaunchHooks


@pytest.fixture(name="temp_dir")
def temp_dir_fixture(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_task_runs_a_long_lived_main_until_told_to_exit(temp_dir):
    directory = workdir_lib.WorkDir()
    spec = task_lib.TaskSpec(
        "server",
        0,
        main="cluster_tasks:serve_until_exit",
        argv=("--port", "1234"),
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(os.path.abspath(p or os.curdir) for p in sys.path),
            SERVER_MARK="marked",
        ),
    )
    launched = []
    (server,) = task_lib.launch_all(
        [spec],
        workdir=directory,
        network=None,
        hooks=LaunchHooks(on_launch=lambda name, pid: launched.append((name, pid))),
    )
    try:
        assert launched == [("server 0", server.pid)]
        assert server.conn.poll(60) and server.conn.recv() == protocol.Alive(server.pid)
        # Alive and Ready are typed messages: the main was found by name.
        assert server.conn.poll(60) and server.conn.recv() == protocol.Ready(server.pid)
        server.ask_to_exit()
        assert server.wait(10) == 7
        assert server.output().splitlines()[-2:] == ["serving --port 1234 marked", "exiting"]
    finally:
        server.kill()
        server.reap()
        directory.remove()
    assert not running(server.pid)
    assert os.listdir(temp_dir) == []
