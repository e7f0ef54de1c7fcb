"""Process-table, temp-dir and network checks of the cluster tests and the pod tests
(tests/pods/conftest.py puts this folder on their sys.path)."""

import os
import sys
import tempfile
import time

import pytest

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import launcher
from compat_distribute.testing.cluster import netns

HOST_NETWORK = os.readlink("/proc/self/ns/net")


def _children_by_parent():
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:  # Gone meanwhile.
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid=None):
    """The descendants of `pid` (default: this process), but the session's warm
    interpreters that fork the tests' programs (see tests/forkrun.py), which
    live as long as the session."""
    children = _children_by_parent()
    forkrun = sys.modules.get("forkrun")  # Not loaded in the tests' own programs.
    warm = forkrun.WarmPython.running if forkrun is not None else set()
    found, todo = set(), [pid or os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in warm:
                found.add(child)
                todo.append(child)
    return found


def running(pid):
    """Whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def network_namespace_users(namespace):
    """Processes of this test inside `namespace` ("net:[inode]") and descriptors
    of this process holding it: what keeps a network namespace alive. Its
    processes are this one's descendants and orphans (a task that outlived its
    parent): the kernel reuses a freed namespace's inode number, maybe for
    another program's namespace on a shared machine."""
    ours = descendants() | set(_children_by_parent().get(1, ()))
    users = []
    for pid in sorted(ours):
        try:
            if os.readlink(f"/proc/{pid}/ns/net") == namespace:
                users.append(f"pid {pid}")
        except OSError:  # Gone meanwhile, or not ours to read.
            pass
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == namespace:
                users.append(f"fd {fd}")
        except OSError:
            pass
    return users


def cluster_dirs(directory=None):
    """This process's cluster directories in `directory` (default: the temp dir)."""
    directory = directory or tempfile.gettempdir()
    mine = f"local_cluster-{os.getpid()}."
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.startswith(mine))


def assert_no_leaks(pids, network_namespace=None):
    """`pids` are gone (dead and reaped); every descendant of this process and
    every cluster directory belongs to a cluster that still runs (the shared
    fixtures); nothing holds the cluster's private network namespace any more."""
    assert pids, "no pids recorded"
    assert [p for p in pids if os.path.exists(f"/proc/{p}")] == []
    live = launcher.running_launchers()
    # A running launch's processes: its tasks and the zygote that forked them.
    live_pids = {p for c in live for p in c.pids + [c.zygote_pid] if p is not None}
    assert descendants() - live_pids == set()
    assert set(cluster_dirs()) - {c.directory for c in live} == set()
    if network_namespace not in (None, HOST_NETWORK):
        assert network_namespace_users(network_namespace) == []


def require_private_network(c):
    if c.network != "private":
        pytest.skip(f"no private network namespace on this machine: {netns.support()}")


def listening(ports):
    """{port: [local address, ...]} of the TCP sockets listening on `ports` in
    this process's network namespace: what the machine's interfaces offer."""
    found = {}
    for table in ("tcp", "tcp6"):
        with open(f"/proc/self/net/{table}") as f:
            for line in list(f)[1:]:
                fields = line.split()
                address, port = fields[1].split(":")
                if fields[3] == "0A" and int(port, 16) in ports:  # TCP_LISTEN
                    if len(address) == 8:  # IPv4, little-endian
                        address = ".".join(str(b) for b in reversed(bytes.fromhex(address)))
                    found.setdefault(int(port, 16), []).append(address)
    return found


def wait_for(condition, timeout, interval=0.01):
    """Whether `condition()` became true within `timeout` seconds (scaled)."""
    deadline = time.monotonic() + deadlines.scaled(timeout)
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


def wait_gone(pids, timeout):
    """The `pids` still running after `timeout` seconds (scaled), [] once all are gone."""
    wait_for(lambda: not any(running(p) for p in pids), timeout)
    return [p for p in pids if running(p)]
