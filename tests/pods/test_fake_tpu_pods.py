"""Fake TPU pods: a multi-host slice as host processes, driven by one client.

Each pod program (pod_programs.py) runs in a client process of its own, since
connecting to a pod changes that process's TensorFlow context for good; the
module shares one v3-32 pod run (4 hosts) between its tests.
"""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pod_helpers
import pytest
from support.leftovers import cluster_dirs
from support.load import bound
from support.processes import descendants
from support.processes import running
from support.processes import wait_gone

from compat_distribute.testing import PRESETS
from compat_distribute.testing import fake_tpu
from compat_distribute.testing import deadlines
from compat_distribute.testing._fake_tpu import topologies
from compat_distribute.testing.cluster import launcher
from compat_distribute.testing.cluster import workdir

pytest_plugins = ["pytester"]



def _client(name, *args, env=None):
    """Runs pod program `name` in a fresh client process; returns its RESULT."""
    return pod_helpers.run_program("pod_programs.py", name, *args, extra_env=env)


@pytest.fixture(name="pod_run", scope="module")
def pod_run_fixture(tmp_path_factory):
    return _client("pod", str(tmp_path_factory.mktemp("pod_checkpoints")))


@pytest.fixture(name="one_host_run", scope="module")
def one_host_run_fixture(pod_run):
    return _client("one_host", pod_run["checkpoint"])


# -- The presets (no process started) ----------------------------------------

# (name, hosts, chips, TensorFlow devices, mesh), from the Cloud TPU pages: a
# host of a pod drives 4 chips.
PODS = [
    ("v2-32", 4, 16, 32, (4, 4, 1, 2)),
    ("v3-32", 4, 16, 32, (4, 4, 1, 2)),
    ("v4-16", 2, 8, 8, (2, 2, 2, 1)),
    ("v4-32", 4, 16, 16, (2, 2, 4, 1)),
    ("v5p-16", 2, 8, 8, (2, 2, 2, 1)),
    ("v5litepod-16", 4, 16, 16, (4, 4, 1, 1)),
    ("v5litepod-32", 8, 32, 32, (4, 8, 1, 1)),
    ("v6e-16", 4, 16, 16, (4, 4, 1, 1)),
    ("v6e-32", 8, 32, 32, (4, 8, 1, 1)),
]


@pytest.mark.parametrize("name, hosts, chips, cores, mesh", PODS, ids=[p[0] for p in PODS])
def test_pod_presets_have_their_hosts_of_four_chips(name, hosts, chips, cores, mesh):
    preset = PRESETS[name]
    assert (preset.hosts, preset.chips, preset.cores, preset.mesh_shape) == (
        hosts,
        chips,
        cores,
        mesh,
    )
    coordinates = topologies.device_coordinates(mesh, hosts)
    assert coordinates.shape == (hosts, cores // hosts, 4)
    # Every core once; each host holds a 2x2x1 block of chips.
    assert len({tuple(c) for c in coordinates.reshape(-1, 4).tolist()}) == cores
    for host in coordinates.tolist():
        xs, ys, zs = ({c[axis] for c in host} for axis in range(3))
        assert (len(xs), len(ys), len(zs)) == (2, 2, 1)


def test_a_pod_resolver_starts_nothing_until_used():
    from compat_distribute.testing import FakeTPUClusterResolver

    resolver = FakeTPUClusterResolver("v4-32")
    assert (resolver.num_hosts, resolver.num_accelerators()) == (4, {"TPU": 4})
    assert resolver.pod.running is False and resolver.pod.pids == []
    assert resolver.core_devices[4] == "/job:worker/replica:0/task:1/device:CPU:0"


@pytest.mark.parametrize(
    "topology, hosts, accepted",
    [
        ("v3-32", 2, "1 (every core in this process) or 4 (its hosts)"),
        ("v3-8", 4, "1"),
    ],
)
def test_a_host_count_the_slice_does_not_have_is_refused(topology, hosts, accepted):
    with pytest.raises(ValueError) as raised:
        fake_tpu(topology, hosts=hosts)
    assert str(raised.value) == (
        f"hosts must be None or {accepted} for the TPU slice {topology!r}; got {hosts!r}. "
        f"A slice has the hosts of its preset: pick a pod preset ({', '.join(topologies.pod_names())}) "
        f"for several hosts."
    )


def test_a_pod_on_gpus_is_refused():
    from compat_distribute.testing import FakeTPUClusterResolver

    with pytest.raises(ValueError, match=r"device_type must be 'CPU' for the pod 'v3-32'"):
        FakeTPUClusterResolver("v3-32", device_type="GPU")


def _never_serves(spec, argv):
    """Host 1 of the pod below: a process that never says it is up."""
    if spec.task_id == 1:
        return [sys.executable, "-c", "import time; time.sleep(600)"]
    return argv


@pytest.mark.multi_worker
def test_a_host_that_never_starts_fails_start_up_naming_it_and_leaves_nothing():
    from compat_distribute.testing._fake_tpu.pod import FakePod
    from compat_distribute.testing.cluster import ClusterTimeoutError
    from compat_distribute.testing.cluster import LaunchHooks

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
    # On a busy machine host 0 may still be importing TensorFlow too (at load
    # 18 on 2 cores it did; $COMPAT_DISTRIBUTE_TIMEOUT_SCALE gives it the time).
    assert raised.value.pending[-1] == "worker 1"
    assert re.match(
        r"local_cluster: (worker 0, )?worker 1 did not start within "
        + re.escape(deadlines.describe(15))
        + r" \(start_timeout\)",
        str(raised.value),
    )
    # The hosts, then the relay to them where they run in a private network.
    names = [name for name, _ in launched]
    assert names in (["worker 0", "worker 1"], ["worker 0", "worker 1", "relay"])
    assert not pod.running and pod.pids == [] and pod.relay_pid is None
    assert descendants() - before == set() and not any(running(p) for _, p in launched)
    live = {c.directory for c in launcher.running_launchers()}  # other modules' shared ones
    assert set(cluster_dirs()) - live == set()


# -- One v3-32 pod run: unmodified TF2 pod code on 4 host processes ----------


@pytest.mark.multi_worker
def test_tf2_pod_code_gets_32_replicas_on_4_host_processes(pod_run):
    assert pod_run["replicas"] == [32, 4, 8]  # replicas, num_hosts, num_replicas_per_host
    assert pod_run["topology"] == [4, 8, [4, 4, 1, 2]]
    assert pod_run["host_0_chips"] == [[0, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0]]
    assert pod_run["num_accelerators"] == {"TPU": 8}  # per host, as TF's resolver says
    addresses = pod_run["cluster_spec"]["worker"]
    assert len(addresses) == 4 and all(a.startswith("127.0.0.1:") for a in addresses)
    assert pod_run["master"] == "grpc://" + addresses[0]
    assert len(pod_run["host_pids"]) == 4 and pod_run["host_processes_are_children"]
    # Host-major: replica r runs on core r % 8 of host r // 8.
    assert pod_run["replica_devices"] == [
        f"/job:worker/replica:0/task:{r // 8}/device:CPU:{r % 8}" for r in range(32)
    ]
    assert pod_run["all_reduce"] == [float(sum(range(32)))] * 32
    assert pod_run["constant_step"] == 32.0


@pytest.mark.multi_worker
def test_a_pod_step_is_traced_once_and_called_once_a_host(pod_run):
    # As a TPU compiles a step once for every core: one trace, then one call on
    # each host (on its first core) that runs that host's 8 replicas.
    assert pod_run["traces"] == 1
    assert pod_run["host_calls"] == [f"/job:worker/replica:0/task:{h}/device:CPU:0" for h in range(4)]


@pytest.mark.multi_worker
def test_strategy_reduce_sums_within_each_host_before_across_hosts(pod_run):
    # MirroredStrategy would reduce to a CPU destination on one device, every
    # core's value crossing gRPC; the fake sums on each host first.
    assert pod_run["reduce"] == [528.0, 16.5, [496.0, 992.0]]
    # Per reduce: one AddN on each of the 4 hosts, one of the host sums on host 0.
    assert pod_run["reduce_add_n_tasks"] == {"0": 6, "1": 3, "2": 3, "3": 3}  # (JSON keys)


@pytest.mark.multi_worker
def test_a_device_assignment_maps_replicas_to_the_cores_of_their_hosts(pod_run):
    # Replicas on the physical coordinates of cores 0-3 of host 1, then of host 2.
    replicas, hosts, devices, total = pod_run["assigned"]
    assert (replicas, hosts, total) == (8, 2, float(sum(range(8))))
    assert devices == [
        f"/job:worker/replica:0/task:{task}/device:CPU:{core}"
        for task in (1, 2)
        for core in range(4)
    ]


@pytest.mark.multi_worker
def test_each_host_runs_its_own_input_pipeline(pod_run):
    # (num_input_pipelines, input_pipeline_id, num_replicas_in_sync), one per host.
    assert pod_run["input_contexts"] == [[4, host, 32] for host in range(4)]


@pytest.mark.multi_worker
def test_a_distributed_dataset_gives_each_global_batch_once_across_the_hosts(pod_run):
    # Batches of 32 over 32 replicas on 4 hosts: every element once, batch by batch.
    assert pod_run["distributed_batches"] == [list(range(i, i + 32)) for i in (0, 32, 64)]


@pytest.mark.multi_worker
def test_eager_run_is_refused_as_on_a_tpu(pod_run):
    kind, message = pod_run["eager_run"]
    assert kind == "NotImplementedError"
    assert message.startswith("TPUStrategy.run(fn, ...) does not support pure eager execution.")


@pytest.mark.multi_worker
def test_pod_training_converges_and_its_checkpoint_restores_on_one_host(pod_run, one_host_run):
    # 15 calls of 10 steps: each call's last loss, falling; y = 3x + 1 learnt.
    losses = pod_run["losses"]
    assert len(losses) == 15
    assert max(losses[-5:]) < losses[0] / 1000
    w, b = pod_run["model"]
    assert abs(w - 3.0) < 1e-3 and abs(b - 1.0) < 1e-3
    assert sorted(pod_run["checkpoint_files"]) == [
        "checkpoint",
        "pod-1.data-00000-of-00001",
        "pod-1.index",
    ]
    restored_w, restored_b, iterations = one_host_run["restored"]
    assert restored_w == [w] * 32 and restored_b == [b] * 32
    assert iterations == 150


@pytest.fixture(name="keras_pod_run", scope="module")
def keras_pod_run_fixture():
    """(RESULT, stderr) of the keras_pod program, which ends as a user's does."""
    return pod_helpers.run_program_and_stderr("pod_programs.py", "keras_pod", fresh=True)


@pytest.mark.multi_worker
def test_keras_fit_on_a_pod_gives_the_weights_of_one_device(keras_pod_run):
    # The V1 shim with steps_per_run=4: a pod all-reduces through one device, not
    # with the collectives that keras-team/keras#19246 trips on, so Keras 3 gets
    # 4 steps a call without multi_step_fix().
    run, _ = keras_pod_run
    assert run["replicas"] == [8, 2]  # a v4-16: 8 cores on 2 hosts
    (steps, pod_losses, pod_weights), (_, losses, weights) = run["pod"], run["one_device"]
    assert steps == {"steps_per_execution": 4}
    assert len(pod_losses) == 5 and pod_losses[-1] < pod_losses[0] / 10
    np.testing.assert_allclose(pod_losses, losses, rtol=1e-4)
    for got, want in zip(pod_weights, weights):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.multi_worker
def test_a_pod_run_that_trains_and_ends_prints_no_tensorflow_errors(keras_pod_run):
    # Keras fit, then tf.function steps over a distributed dataset to its end
    # (batches of 16 of 0..47, 2 a replica), then the fake stops and the program
    # exits. TensorFlow logged an error per host for each function it dropped
    # once the hosts were gone, one per context it could not close, and an end
    # of data left on an executor ("Exception ignored in: Executor.__del__").
    run, stderr = keras_pod_run
    assert run["steps_to_the_end_of_data"] == [sum(range(16)), sum(range(16, 32)), sum(range(32, 48))]
    for noise in (
        "Failed to remove function remotely",
        "Unable to close remote context",
        "Connection refused",
        "Exception ignored",
        "End of sequence",
    ):
        assert noise not in stderr, stderr[-5000:]


@pytest.mark.multi_worker
def test_host_0_writes_the_checkpoint_data(pod_run):
    # Bytes written while a 1 MB variable was saved: client, hosts 0-3.
    client, host_0, *others = pod_run["checkpoint_bytes_written"]
    assert host_0 >= 1_000_000
    assert client < 10_000 and max(others) < 10_000


@pytest.mark.multi_worker
def test_the_v1_shim_runs_on_the_pod_and_shares_its_hosts(pod_run):
    assert pod_run["v1"] == [32, 4, 4]  # replicas, num_hosts, steps_per_run
    assert pod_run["v1_all_reduce"] == float(sum(range(32)))
    assert pod_run["host_pids_after_v1"] == pod_run["host_pids"]


@pytest.mark.multi_worker
def test_a_killed_host_fails_the_next_step_naming_it(pod_run):
    pid = pod_run["host_pids"][2]
    assert pod_run["watchdog"] == f"host 2 (worker 2, pid {pid}, was killed by SIGKILL)"
    # Within seconds, whatever the step touches (these touch no variable).
    for kind, message, seconds in pod_run["dead_host_steps"]:
        assert kind == "UnavailableError"
        assert "/job:worker/replica:0/task:2/" in message
        assert seconds < bound(10)
    assert pod_run["check"] == [
        "ClusterTaskError",
        f"fake TPU pod v3-32: worker 2 (pid {pid}) was killed by SIGKILL.",
        2,
    ]


@pytest.mark.multi_worker
def test_a_stopped_host_is_killed_and_named(pod_run):
    pid = pod_run["host_pids"][1]
    assert pod_run["stopped_host"] == [
        f"host 1 (worker 1, pid {pid}, was stopped (SIGSTOP or a debugger), so it was killed)",
        False,
    ]


@pytest.mark.multi_worker
def test_stop_leaves_no_host_process_and_no_directory(pod_run):
    assert pod_run["after_stop"] == {
        "hosts_alive": [],
        "children": [],
        "cluster_dir_exists": False,
        "running": False,
    }


@pytest.mark.multi_worker
def test_a_stopped_fake_starts_again_with_fresh_hosts(pod_run):
    assert pod_run["restart"] == [[], 4, float(sum(range(32)))]
    assert pod_run["restart_hosts_alive"] == []


@pytest.mark.multi_worker
def test_collectives_in_a_while_loop_of_a_pod_step_meet_across_the_hosts(pod_run):
    # The one trace runs in an executor of its own inside each host's call, so the
    # replicas' loops are alike and their collectives meet (one host: test_one_trace).
    sums, gathers, total = pod_run["collectives_in_a_loop"]
    assert sums == [3.0 * sum(range(1, 33))]  # 3 rounds of 1 + ... + 32
    assert gathers == [[3.0 * r for r in range(32)]]
    assert total == [3.0 * sum(range(32))]  # 3 rounds of 0 + ... + 31, on every copy


@pytest.mark.multi_worker
def test_an_iterator_left_in_a_step_before_its_end_does_not_block_the_hosts(pod_run):
    # Each core's reader is destroyed on the host's inter-op pool and waits for
    # another thread of it: a pool of the machine's 2 cores blocked for good.
    # Host h's k-th replica takes element 4k + h (TensorFlow's sharding by element).
    assert pod_run["iterator_left_in_a_step"] == [[4 * (r % 8) + r // 8 for r in range(32)]] * 2


@pytest.mark.multi_worker
def test_a_one_host_fake_runs_after_a_pod_in_the_same_process(one_host_run):
    # The stopped pod's hosts left the context (none would answer: UnavailableError
    # at the next function), and so did its default device, host 0's first core.
    pod_sum, running, jobs, device = one_host_run["pod_before"]
    assert (pod_sum, running) == (float(sum(range(8))), False)  # a v4-16's 8 replicas
    assert jobs == ["localhost"]
    assert device == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert one_host_run["all_reduce"] == float(sum(range(32)))


@pytest.mark.multi_worker
def test_hosts_1_gives_the_same_32_replicas_in_the_client_alone(one_host_run):
    # Named as a Cloud TPU is, it answers with a loopback grpc:// master that
    # nothing dials: no process is started (children) and the steps run here.
    assert one_host_run["master"] == "grpc://127.0.0.1:8470"
    assert one_host_run["topology"] == [1, 32]
    assert one_host_run["replicas"] == [32, 1, 32]
    assert one_host_run["all_reduce"] == float(sum(range(32)))
    assert one_host_run["children"] == []
    assert one_host_run["input_contexts"] == [[1, 0, 32]]
    assert one_host_run["v1"] == [32, 1, 4]
    assert one_host_run["v1_all_reduce"] == float(sum(range(32)))


@pytest.mark.multi_worker
def test_hosts_die_with_a_client_killed_by_sigkill(tmp_path):
    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    client = subprocess.Popen(
        pod_helpers.program_command("pod_programs.py", "hold_pod"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=pod_helpers.env({"TMPDIR": str(temp_dir)}),
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
    assert wait_gone(pids) == []
    # The killed client could not remove its directory; the next launch does.
    assert workdir.reap_abandoned(str(temp_dir)) == [directory]
    assert os.listdir(temp_dir) == []
    assert client.returncode == -signal.SIGKILL


@pytest.mark.multi_worker
def test_the_smoke_command_runs_on_a_pod_and_leaves_nothing(tmp_path):
    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "compat_distribute", "smoke", "--topology", "v4-16", "--json"],
        capture_output=True,
        text=True,
        timeout=pod_helpers.program_timeout(),
        env=pod_helpers.env({"TMPDIR": str(temp_dir)}),
    )
    assert result.returncode == 0, result.stderr[-5000:]
    report = json.loads(result.stdout)
    assert (report["ok"], report["device"], report["replicas"]) == (
        True,
        "fake (v4-16, 8 cores on 2 host processes)",
        8,
    )
    assert [c["name"] for c in report["checks"] if not c["ok"]] == []
    assert os.listdir(temp_dir) == []  # the hosts' directory, AutoGraph's sources


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
    result = pytester.runpytest_subprocess("-p", "no:xdist", timeout=pod_helpers.program_timeout())
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
    assert network_run["dead_relay_step_s"] < bound(10)
    assert network_run["relay_check"] == [
        "ClusterTaskError",
        f"fake TPU pod v4-16: relay (pid {pid}) was killed by SIGKILL.",
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
        "COMPAT_DISTRIBUTE_POD_NETWORK must be one of 'auto', 'private', 'host'; got 'loopback'."
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

