"""The watcher that names a task of the cluster that never starts: for a
`cluster_resolver=` as for TF_CONFIG, importing this package wherever the
process found it, and kept through a Ctrl-C."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from compat_distribute import _cluster_wait
from compat_distribute.testing import deadlines

PACKAGE = os.path.dirname(os.path.abspath(_cluster_wait.__file__))


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _waiting(source, ports, waited, limit):
    where, cluster, place = _cluster_wait.SOURCES[source]
    return (
        f"MultiWorkerMirroredStrategy() in task worker 0 has waited {waited} s for the other "
        f"tasks of its cluster ({where}): nothing listens yet at worker 1 "
        f"(127.0.0.1:{ports[1]}): start each task with the same {cluster} and {place}, or "
        f"correct the addresses. COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT={limit} ends this "
        f"process at {limit} s."
    )


# TF 2.21 waits for the tasks of any resolver's cluster (collective_all_reduce_strategy's
# _initialize_multi_worker reads cluster_resolver.cluster_spec()), eagerly: no TF_CONFIG here.
_RESOLVER_WORKER = """
import tensorflow as tf
from compat_distribute import _cluster_wait
_cluster_wait.WARN_AFTER_S = 2
import compat_distribute as cd
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.train.ClusterSpec({"worker": ["127.0.0.1:%d", "127.0.0.1:%d"]}),
    task_type="worker", task_id=0)
print("building", flush=True)
cd.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
print("built", flush=True)
"""


@pytest.mark.multi_worker
def test_a_resolvers_peer_that_never_starts_is_named_and_the_deadline_ends_the_wait(
    run_python, monkeypatch
):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    ports = _free_ports(2)
    result = run_python(
        _RESOLVER_WORKER % tuple(ports), timeout=120, env={_cluster_wait.DEADLINE_ENV: "8"}
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("compat_distribute:")]
    assert lines == [
        "compat_distribute: warning: " + _waiting("cluster_resolver", ports, 2, 8),
        "compat_distribute: error: "
        + _waiting("cluster_resolver", ports, 8, 8)
        + " Killing it now (SIGKILL).",
    ], result.stderr[-3000:]
    assert result.stdout == "building\n"
    assert result.returncode == -9


def test_a_resolvers_cluster_is_read_as_tf_config_would_give_it():
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"chief": ["127.0.0.1:1"], "worker": {2: "127.0.0.1:3"}}),
        task_type="chief",
        task_id=0,
    )
    config = _cluster_wait.from_resolver(resolver)
    assert config.cluster == {"chief": ("127.0.0.1:1",), "worker": {2: "127.0.0.1:3"}}
    assert _cluster_wait._peers(config) == [("worker 2", "127.0.0.1:3")]
    empty = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}))
    assert _cluster_wait.from_resolver(empty) is None


# A process that found the package through its own sys.path (not PYTHONPATH, not
# its working directory), with a Ctrl-C handler that, like TensorFlow holding the
# interpreter, does not stop it.
_WATCHED = """
import signal, sys, time
sys.path.insert(0, sys.argv[1])
from compat_distribute import _cluster_wait
from compat_distribute._tf_config import TFConfig
signal.signal(signal.SIGINT, lambda *_: print("SIGINT", flush=True))
_cluster_wait.WARN_AFTER_S = 1
config = TFConfig({"worker": ["127.0.0.1:%d", "127.0.0.1:%d"]}, "worker", 0)
with _cluster_wait.watching(config, limit=5):
    print("waiting", flush=True)
    time.sleep(60)
print("not killed", flush=True)
"""


def test_the_watcher_imports_the_processs_package_and_outlives_a_ctrl_c(tmp_path):
    # A copy of the package whose watcher speaks differently: the line says
    # which copy the watcher imported.
    root = tmp_path / "elsewhere"
    shutil.copytree(PACKAGE, root / "compat_distribute",
                    ignore=shutil.ignore_patterns("__pycache__"))
    wait_py = root / "compat_distribute" / "_cluster_wait.py"
    wait_py.write_text(wait_py.read_text().replace('"compat_distribute: ', '"copied: '))
    ports = _free_ports(2)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_WATCHED % tuple(ports)), str(root)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives a program
    )
    try:
        assert process.stdout.readline() == "waiting\n"
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the group
        out, err = process.communicate(timeout=deadlines.scaled(60))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert out == "SIGINT\n"
    assert [line for line in err.splitlines() if line] == [
        "copied: warning: " + _waiting("TF_CONFIG", ports, 1, 5),
        "copied: error: " + _waiting("TF_CONFIG", ports, 5, 5) + " Killing it now (SIGKILL).",
    ]
    assert process.returncode == -9
