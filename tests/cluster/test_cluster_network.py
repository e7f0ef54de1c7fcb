"""local_cluster's network: TensorFlow's gRPC server listens on 0.0.0.0, so a
cluster's tasks run in a private network namespace of its own where possible."""

import os
import re
import shutil
import socket
import subprocess
import sys
import threading

import cluster_tasks as tasks
import pytest
from cluster_checks import HOST_NETWORK
from cluster_checks import descendants
from cluster_checks import listening
from cluster_checks import network_namespace_users

from compat_distribute.testing import deadlines
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
    argv, pass_fds = network.enter([sys.executable, "-I", "-S", "-c", listen])
    listener = subprocess.Popen(argv, pass_fds=pass_fds, stdout=subprocess.PIPE)
    try:
        port = int(listener.stdout.readline())
        namespace = os.readlink(f"/proc/{listener.pid}/ns/net")
        assert namespace != HOST_NETWORK
        assert tasks.connect_to(f"127.0.0.1:{port}") == "ConnectionRefusedError"
        connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"
        argv, pass_fds = network.enter([sys.executable, "-I", "-S", "-c", connect])
        inside = subprocess.run(
            argv,
            pass_fds=pass_fds,
            capture_output=True,
            text=True,
            timeout=deadlines.scaled(30),
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


# -- LocalServers: servers in a private network, reached through a relay ------


def _first_frame_type(address):
    """The type of the first HTTP/2 frame a gRPC server sends back to a client
    preface (4: SETTINGS), or None when the connection closes first."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
        header = b""
        while len(header) < 9:
            chunk = s.recv(9 - len(header))
            if not chunk:
                return None
            header += chunk
    return header[3]


def _echo_once(listener):
    connection, _ = listener.accept()
    with connection:
        while data := connection.recv(65536):
            connection.sendall(data)


_ECHO_CLIENT = """\
import hashlib, socket, sys
data = bytes(range(256)) * 8192  # 2 MiB
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30) as s:
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    back = b"".join(iter(lambda: s.recv(65536), b""))
print(back == data, len(back), flush=True)
"""


@pytest.mark.multi_worker(2)
@pytest.mark.parametrize("user", [False, True], ids=["as-root", "user-namespace"])
def test_servers_in_a_private_network_are_reached_through_the_relay_only(user, monkeypatch):
    from compat_distribute.testing.cluster.host import LocalServers

    tools = [shutil.which(name) for name in ("unshare", "nsenter")]
    if None in tools:
        pytest.skip("unshare or nsenter (util-linux) is not installed")
    try:
        netns.PrivateNetwork(*tools, user).close()
    except ClusterError as e:
        pytest.skip(f"cannot make this kind of private network here: {e}")
    monkeypatch.setattr(netns, "support", lambda: (*tools, user))
    servers = LocalServers(2, devices_per_host=1, network="private").start()
    try:
        addresses = servers.cluster_spec["worker"]
        ports = [int(a.rsplit(":", 1)[1]) for a in addresses]
        relay, hosts = servers.relay_pid, servers.pids
        namespace = os.readlink(f"/proc/{relay}/ns/net")
        assert namespace != HOST_NETWORK
        assert [os.readlink(f"/proc/{p}/ns/net") for p in hosts] == [namespace] * 2
        assert descendants() >= {relay, *hosts}
        # Here only the relay's sockets listen on the hosts' ports, on 127.0.0.1;
        # through them each gRPC server answers an HTTP/2 client.
        assert listening(set(ports)) == {p: ["127.0.0.1"] for p in ports}
        assert [_first_frame_type(a) for a in addresses] == [4, 4]
        # And back: a server of this process, reached from inside at its own port.
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]
            echo = threading.Thread(target=_echo_once, args=(listener,), daemon=True)
            echo.start()
            servers.forward_to_client(port)
            inside = [tools[1], f"--target={relay}", "--net"]
            inside += ["--user", "--preserve-credentials"] if user else []
            client = subprocess.run(
                inside + ["--", sys.executable, "-I", "-S", "-c", _ECHO_CLIENT, str(port)],
                capture_output=True,
                text=True,
                timeout=deadlines.scaled(60),
            )
            echo.join(10)
        assert client.stdout == f"True {256 * 8192}\n", client.stderr
    finally:
        servers.stop()
    assert [p for p in [relay, *hosts] if os.path.exists(f"/proc/{p}")] == []
    assert listening(set(ports)) == {}
    assert network_namespace_users(namespace) == []


def test_a_taken_port_for_the_relay_fails_start_up_before_anything_runs():
    from compat_distribute.testing.cluster import LaunchHooks
    from compat_distribute.testing.cluster.host import LocalServers

    if isinstance(netns.support(), str):
        pytest.skip(f"no private network namespace on this machine: {netns.support()}")
    before = descendants()
    with socket.create_server(("127.0.0.1", 0)) as squatter:
        taken = squatter.getsockname()[1]
        fds = sorted(os.listdir("/proc/self/fd"))
        servers = LocalServers(
            2,
            devices_per_host=1,
            network="private",
            hooks=LaunchHooks(pick_ports=lambda count: [taken] * count),
        )
        with pytest.raises(ClusterError) as raised:
            servers.start()
        # The listening sockets bound so far and the namespace were closed.
        assert sorted(os.listdir("/proc/self/fd")) == fds
    assert str(raised.value).startswith(
        f"local_cluster: the relay's listening socket for 127.0.0.1:{taken} could not bind: "
        f"[Errno 98] Address already in use. Pick a free port (or let the cluster pick)."
    )
    assert not servers.running and servers.relay_pid is None and descendants() <= before
    assert servers.directory is None
