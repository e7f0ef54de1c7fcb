"""local_cluster's network: TensorFlow's gRPC server listens on 0.0.0.0, so a
cluster's tasks run in a private network namespace of its own where possible."""

import os
import re
import shutil
import subprocess
import sys

import cluster_tasks as tasks
import pytest
from cluster_checks import HOST_NETWORK
from cluster_checks import descendants
from cluster_checks import network_namespace_users

from compat_distribute.testing.cluster import ClusterError
from compat_distribute.testing.cluster import local_cluster
from compat_distribute.testing.cluster import netns


@pytest.mark.multi_worker
@pytest.mark.parametrize("user", [False, True], ids=["as-root", "user-namespace"])
def test_private_network_keeps_a_listener_on_all_interfaces_inside(user):
    """The namespace itself, both ways of making it, with a plain Python
    listener bound like TensorFlow's (0.0.0.0): seen inside, not here."""
    tools = [shutil.which(name) for name in ("unshare", "nsenter")]
    if None in tools:
        pytest.skip("unshare or nsenter (util-linux) is not installed")
    try:
        network = netns.PrivateNetwork(*tools, user)
    except ClusterError as e:
        pytest.skip(f"cannot make this kind of private network here: {e}")
    listen = (
        "import socket, sys, time\n"
        "s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
    )
    listener = subprocess.Popen(
        network.enter([sys.executable, "-I", "-S", "-c", listen]),
        pass_fds=network.fds,
        stdout=subprocess.PIPE,
    )
    try:
        port = int(listener.stdout.readline())
        namespace = os.readlink(f"/proc/{listener.pid}/ns/net")
        assert namespace != HOST_NETWORK
        assert tasks.connect_to(f"127.0.0.1:{port}") == "ConnectionRefusedError"
        connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"
        inside = subprocess.run(
            network.enter([sys.executable, "-I", "-S", "-c", connect]),
            pass_fds=network.fds,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert inside.returncode == 0, inside.stderr
    finally:
        listener.kill()
        listener.wait()
        listener.stdout.close()
        network.close()
    assert network_namespace_users(namespace) == []


def test_bad_network_is_refused():
    for network in ("loopback", "Private", None, True):
        with pytest.raises(
            ValueError,
            match=rf"network must be one of 'private', 'host', 'auto'; got {re.escape(repr(network))} ",
        ):
            local_cluster(2, network=network)


def test_probe_says_which_tools_are_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert netns.probe() == (
        "unshare and nsenter (util-linux) not found on PATH"
    )


def test_without_a_private_network_private_fails_and_auto_warns(monkeypatch):
    # The once-per-process probe's answer, as on a machine without util-linux.
    monkeypatch.setattr(
        netns, "support", lambda: "unshare and nsenter (util-linux) not found on PATH"
    )
    before = descendants()
    private = local_cluster(2, network="private")
    with pytest.raises(
        ClusterError,
        match=r"local_cluster\(network='private'\) cannot make a private network namespace "
        r"here: unshare and nsenter \(util-linux\) not found on PATH\. As root",
    ):
        private.start()
    assert not private.running and descendants() <= before
    auto = local_cluster(2)
    with pytest.warns(
        RuntimeWarning,
        match=r"local_cluster\(network='auto'\) runs its tasks on the host network: no "
        r"private network namespace here \(unshare and nsenter \(util-linux\) not found",
    ) as warned:
        assert auto.network == "host"
        assert auto.network == "host"  # Resolved once: one warning.
    assert len(warned) == 1
    assert local_cluster(2, network="host").network == "host"
