"""Fake TPU pods' host processes: start-up failures, a client killed by SIGKILL,
the smoke command, the pytest plugin and TestCase sharing one pod, and where the
hosts listen (a private network reached through a relay). The pod programs
(pod_programs.py) run in client processes of their own.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import compat_distribute.testing
from compat_distribute.testing.cluster import workdir
from pod_client import PROGRAM_TIMEOUT_S
from pod_client import TESTS_DIR
from pod_client import client as _client
from pod_client import client_env as _env

pytest_plugins = ["pytester"]


def _never_serves(spec, argv):
    """Host 1 of the pod below: a process that never says it is up."""
    if spec.task_id == 1:
        return [sys.executable, "-c", "import time; time.sleep(600)"]
    return argv


@pytest.mark.multi_worker
def test_a_host_that_never_starts_fails_start_up_naming_it_and_leaves_nothing():
    from cluster_checks import cluster_dirs
    from cluster_checks import descendants

    from compat_distribute.testing._fake_tpu.pod import FakePod
    from compat_distribute.testing.cluster import ClusterTimeoutError
    from compat_distribute.testing.cluster import LaunchHooks
    from compat_distribute.testing.cluster import lifecycle

    launched = []
    pod = FakePod(
        "v4-16",
        2,
        4,
        start_timeout=15,
        hooks=LaunchHooks(
            command=_never_serves, on_launch=lambda name, pid: launched.append((name, pid))
        ),
    )
    before = descendants()
    with pytest.raises(ClusterTimeoutError) as raised:
        pod.start()
    assert raised.value.pending == ["worker 1"]
    assert str(raised.value).startswith(
        "local_cluster: worker 1 did not start within 15 s (start_timeout)"
    )
    # The hosts, then the relay to them where they run in a private network.
    names = [name for name, _ in launched]
    assert names in (["worker 0", "worker 1"], ["worker 0", "worker 1", "relay"])
    assert not pod.running and pod.pids == [] and pod.relay_pid is None
    assert descendants() - before == set() and not any(_running(p) for _, p in launched)
    live = {c.directory for c in lifecycle.running_clusters()}  # other modules' shared ones
    assert set(cluster_dirs()) - live == set()


@pytest.mark.multi_worker
def test_hosts_die_with_a_client_killed_by_sigkill(tmp_path):
    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    client = subprocess.Popen(
        [sys.executable, os.path.join(TESTS_DIR, "pod_programs.py"), "hold_pod"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env({"TMPDIR": str(temp_dir)}),
    )
    try:
        line = client.stdout.readline()
        relay = client.stdout.readline().split()
    finally:
        client.kill()
        client.wait()
        client.stdout.close()
    word, directory, *pids = line.split()
    pids = [int(p) for p in pids]
    assert word == "HOSTS" and len(pids) == 2 and os.path.dirname(directory) == str(temp_dir)
    assert relay[0] == "RELAY"
    pids += [] if relay[1] == "none" else [int(relay[1])]  # none on the host network
    deadline = time.monotonic() + 10
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if _running(p)] == []
    # The killed client could not remove its directory; the next launch does.
    assert workdir.reap_abandoned(str(temp_dir)) == [directory]
    assert os.listdir(temp_dir) == []
    assert client.returncode == -signal.SIGKILL


def _running(pid):
    from cluster_checks import running

    return running(pid)


@pytest.mark.multi_worker
def test_the_smoke_command_runs_on_a_pod_and_leaves_nothing(tmp_path):
    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "compat_distribute", "smoke", "--topology", "v4-16", "--json"],
        capture_output=True,
        text=True,
        timeout=PROGRAM_TIMEOUT_S,
        env=_env({"TMPDIR": str(temp_dir)}),
    )
    assert result.returncode == 0, result.stderr[-5000:]
    report = json.loads(result.stdout)
    assert (report["ok"], report["device"], report["replicas"]) == (
        True,
        "fake TPU v4-16 (8 cores on 2 host processes)",
        8,
    )
    assert [c["name"] for c in report["checks"] if not c["ok"]] == []
    # The hosts' directory is gone (AutoGraph's own temp files stay, as in any TF program).
    assert [n for n in os.listdir(temp_dir) if n.startswith(workdir.PREFIX)] == []


_POD_PROJECT = """
import tensorflow as tf

import compat_distribute.testing

HOST_PIDS = []


def _summed_ids(strategy):
    @tf.function
    def step():
        def replica():
            context = tf.distribute.get_replica_context()
            return context.all_reduce("SUM", context.replica_id_in_sync_group)

        return strategy.run(replica)

    return [int(v) for v in strategy.experimental_local_results(step())]


def test_fixture(tpu_strategy, tpu_resolver):
    assert tpu_strategy.num_replicas_in_sync == 8
    assert (tpu_strategy.extended.num_hosts, tpu_strategy.extended.num_replicas_per_host) == (2, 4)
    assert _summed_ids(tpu_strategy) == [28] * 8
    assert len(tpu_resolver.pod.pids) == 2
    HOST_PIDS.extend(tpu_resolver.pod.pids)
    # The cores are the hosts' devices: this process made no virtual devices for them.
    local = [d.name for d in tf.config.list_logical_devices("CPU") if "/job:worker/" not in d.name]
    assert local == ["/device:CPU:0"]


class PodTest(compat_distribute.testing.TestCase):

    def test_testcase(self):
        self.assertEqual(self.tpu_strategy.extended.num_hosts, 2)
        self.assertEqual(self.tpu_resolver.pod.pids, HOST_PIDS)  # the fixture's hosts
        self.assertEqual(_summed_ids(self.tpu_strategy), [28] * 8)
"""


@pytest.mark.multi_worker
def test_the_pytest_plugin_and_the_testcase_share_one_pod(pytester, monkeypatch):
    # The TestCase reads the environment; the plugin the same variables. The
    # pod's own host count, given, runs its hosts as the default does.
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY", "v4-16")
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS", "2")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    pytester.makepyfile(test_pod=_POD_PROJECT)
    result = pytester.runpytest_subprocess("-p", "no:xdist", timeout=PROGRAM_TIMEOUT_S)
    result.stdout.fnmatch_lines(
        ["compat_distribute: tpu=fake (v4-16, 8 cores on 2 host processes), tf-devices=*"]
    )
    result.assert_outcomes(passed=2, skipped=1)  # tf.test.TestCase skips its test_session


# -- Where the hosts listen: a private network, reached through a relay -------


@pytest.fixture(name="network_run", scope="module")
def network_run_fixture():
    return _client("pod_network")


def _require_relay(network_run):
    if not network_run["relay"]:
        from compat_distribute.testing.cluster import netns

        pytest.skip(f"no private network namespace on this machine: {netns.support()}")


@pytest.mark.multi_worker
def test_pod_servers_listen_on_loopback_only_in_the_clients_network(network_run):
    _require_relay(network_run)
    # Each host's port is the relay's, on 127.0.0.1 alone; the servers
    # themselves (0.0.0.0) and the relay live in a network of their own.
    assert list(network_run["listening"].values()) == [["127.0.0.1"], ["127.0.0.1"]]
    assert network_run["namespaces"] == [True, True, True]
    if network_run["machine_address"] is not None:
        assert network_run["from_the_machine_address"] == ["ConnectionRefusedError"] * 2


@pytest.mark.multi_worker
def test_pod_steps_through_the_relay_give_the_right_values(network_run):
    _require_relay(network_run)
    # Every replica read a value of the client (the hosts called it back).
    assert network_run["all_reduce"] == [8 * 100.0 + sum(range(8))] * 8
    assert network_run["children"]  # the hosts and the relay, nothing else


@pytest.mark.multi_worker
def test_a_killed_relay_is_named_and_fails_the_next_step(network_run):
    _require_relay(network_run)
    pid, failure = network_run["relay_watchdog"]
    assert failure == (
        f"the relay to the hosts (relay, pid {pid}, was killed by SIGKILL; the hosts were "
        f"killed, since nothing can reach them)"
    )
    assert network_run["dead_relay_step"] == "UnavailableError"
    assert network_run["dead_relay_step_s"] < 10
    assert network_run["relay_check"] == [
        "ClusterTaskError",
        f"local_cluster: relay (pid {pid}) was killed by SIGKILL.",
        "relay",
    ]
    assert network_run["hosts_after_relay"] == []


@pytest.mark.multi_worker
def test_stopping_a_pod_leaves_no_host_relay_directory_or_listener(network_run):
    assert network_run["after_stop"] == [[], [], False, {}]


def test_a_pod_network_the_harness_does_not_know_is_refused(monkeypatch):
    from compat_distribute.testing import FakeTPUClusterResolver

    monkeypatch.setenv("COMPAT_DISTRIBUTE_POD_NETWORK", "loopback")
    with pytest.raises(ValueError) as raised:
        FakeTPUClusterResolver("v4-16")
    assert str(raised.value).startswith(
        "$COMPAT_DISTRIBUTE_POD_NETWORK: network must be one of 'private', 'host', 'auto'; "
        "got 'loopback' (str)."
    )
    monkeypatch.setenv("COMPAT_DISTRIBUTE_POD_NETWORK", "host")
    resolver = FakeTPUClusterResolver("v4-16")
    assert resolver.pod.running is False and resolver.pod.relay_pid is None


def test_a_pod_without_a_private_network_warns_and_runs_its_hosts_on_the_host_network(
    monkeypatch,
):
    from compat_distribute.testing._fake_tpu.pod import FakePod
    from compat_distribute.testing.cluster import netns

    monkeypatch.setattr(netns, "support", lambda: "unshare and nsenter (util-linux) not found on PATH")
    pod = FakePod("v4-16", 2, 4)
    with pytest.warns(RuntimeWarning) as warned:
        assert pod.network == "host"
        assert pod.network == "host"  # Resolved once: one warning.
    assert [str(w.message) for w in warned] == [
        "fake TPU pod v4-16 runs its hosts on the host network: no private network namespace "
        "here (unshare and nsenter (util-linux) not found on PATH). Their gRPC servers listen "
        "on all interfaces, since TensorFlow binds 0.0.0.0. Set "
        "$COMPAT_DISTRIBUTE_POD_NETWORK=host to accept that without this warning."
    ]
    assert FakePod("v4-16", 2, 4, network="host").network == "host"
    assert not pod.running and pod.pids == []

