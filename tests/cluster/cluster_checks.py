"""The cluster tests' leak checks; the process-table, temp-dir and socket checks they
share with the pod tests are in `support` (and named here too)."""

import os

import pytest

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import launcher
from compat_distribute.testing.cluster import netns
from support.leftovers import cluster_dirs, listening  # noqa: F401  # the cluster tests' names
from support.processes import _children_by_parent, descendants, running, wait_for, wait_gone  # noqa: F401

HOST_NETWORK = os.readlink("/proc/self/ns/net")


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
