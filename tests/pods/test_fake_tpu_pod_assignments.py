"""Device assignments and logical-device splitting on a fake TPU pod, as on a real one.

One v3-32 client process (pod_assignment_programs.py) builds every strategy the
pod tests check; one pytest process runs the conformance behaviours on a v4-16 pod.
What TPUStrategy does with an assignment (tpu_strategy.py, TPUExtended): each
logical core on the core its coordinates name, a replica computing on (and fed
on the host of) its logical core 0, one input pipeline per host of those cores
in the order of their first replica, replica r taking element r of the
pipelines' outputs, `num_hosts` / `num_replicas_per_host` from the assignment.
"""

import ast
import importlib.util
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pod_helpers
import pytest

from compat_distribute.testing import deadlines
from compat_distribute.testing._fake_tpu import topologies


@pytest.fixture(name="pod", scope="module")
def pod_fixture():
    """The program's RESULT: one v3-32 start for every assignment below."""
    return pod_helpers.run_program("pod_assignment_programs.py", "pod_assignments")


def core(task, index):
    return f"/job:worker/replica:0/task:{task}/device:CPU:{index}"


def task_of(device):
    return int(device.split("/task:")[1].split("/")[0])


def tpu_feed(replica_devices):
    """What TPUStrategy feeds each replica, restated: pipeline p (p-th host in order of
    its first replica) yields 100 * p + k for the k-th replica on its host, and
    replica r takes element r of the pipelines' outputs, pipeline by pipeline.

    Returns (the value each replica gets, the device each value is prefetched to).
    """
    hosts = [task_of(d) for d in replica_devices]
    order = list(dict.fromkeys(hosts))
    slots = [
        (100 * p + k, device)
        for p, host in enumerate(order)
        for k, device in enumerate(d for d, h in zip(replica_devices, hosts) if h == host)
    ]
    return [value for value, _ in slots], [device for _, device in slots]


@pytest.mark.multi_worker
def test_a_client_with_a_small_inter_op_pool_gives_the_hosts_contexts_enough_threads(pod):
    # The client names 2 threads; the hosts' contexts for it would take 2 for 8 cores,
    # and an iterator left in a step before its end would block a host for good.
    assert pod["iterator_left_in_a_step"] == [[4 * (r % 8) + r // 8 for r in range(32)]] * 2


# -- 2x2 slices: DeviceAssignment.build(computation_shape=[2, 2, 1, 1]) ---------


@pytest.mark.multi_worker
def test_2x2_slices_put_each_logical_core_on_the_core_its_coordinates_name(pod):
    slices = pod["slices"]
    # 8 replicas on 4 hosts, 2 a host: min(8, 8 cores // 4 per replica).
    assert slices["replicas"] == [8, 4, 2]
    assert slices["cores"] == slices["named"]  # DeviceAssignment.tpu_device's, TPU -> CPU
    # Replica r: one core of each of the 4 chips of host r // 2 (a chip's core r % 2).
    assert slices["cores"] == [
        [core(r // 2, 2 * chip + r % 2) for chip in (0, 2, 1, 3)] for r in range(8)
    ]
    assert slices["replica_devices"] == [core(r // 2, r % 2) for r in range(8)]


@pytest.mark.multi_worker
def test_2x2_slices_read_input_on_their_own_hosts(pod):
    slices = pod["slices"]
    assert slices["contexts"] == [[4, host, 8] for host in range(4)]
    # Replica r: host r // 2's pipeline, its (r % 2)-th element, prefetched to its core 0.
    assert slices["fed"] == [100 * (r // 2) + r % 2 for r in range(8)]
    assert slices["input_devices"] == slices["replica_devices"]
    assert slices["output_devices"] == slices["replica_devices"]
    assert slices["all_reduce"] == [sum(range(8))] * 8


@pytest.mark.multi_worker
def test_2x2_slices_run_logical_device_annotations_and_variables_on_a_logical_core(pod):
    model_parallel = pod["slices"]["model_parallel"]
    # Made in experimental_logical_device(3): on each replica's logical core 3.
    assert model_parallel["variable_devices"] == [cores[3] for cores in pod["slices"]["cores"]]
    # Split, assigned and replicated tensors compute as on a TPU; the variable,
    # updated in the step (2.0 + mean of 1.0), is read after its update.
    assert model_parallel["outputs"] == [model_parallel["expected"]] * 8


@pytest.mark.multi_worker
def test_a_hand_made_2x2_slice_spans_two_hosts(pod):
    across = pod["across"]
    # Chips x = 1..2, y = 0..1: x = 1 on host 0, x = 2 on host 1.
    assert across["cores"] == across["named"] == [[core(0, 2), core(1, 0), core(0, 6), core(1, 4)]]
    assert across["replicas"] == [1, 1, 1]
    # Input and compute on host 0, the host of logical core 0.
    assert across["contexts"] == [[1, 0, 1]]
    assert across["input_devices"] == across["output_devices"] == [core(0, 2)]
    assert across["model_parallel"]["variable_devices"] == [core(1, 4)]
    assert across["model_parallel"]["outputs"] == [across["model_parallel"]["expected"]]


# -- computation_shape spanning hosts ------------------------------------------


@pytest.mark.multi_worker
def test_replicas_of_16_cores_span_two_hosts_each(pod):
    halves = pod["halves"]
    assert halves["cores"] == halves["named"]
    assert [sorted({task_of(d) for d in cores}) for cores in halves["cores"]] == [[0, 1], [2, 3]]
    # TPUExtended's arithmetic: 2 hosts hold logical cores 0; 8 cores a host // 16
    # cores a replica = 0 replicas a host (min(2, 0)), as a real pod answers.
    assert halves["replicas"] == [2, 2, 0]
    assert halves["contexts"] == [[2, 0, 2], [2, 1, 2]]
    assert halves["fed"] == [0, 100]
    assert halves["input_devices"] == halves["output_devices"] == [core(0, 0), core(2, 0)]
    assert halves["all_reduce"] == [1, 1]
    model_parallel = halves["model_parallel"]
    # Logical core 4 is on the replica's second host.
    assert model_parallel["variable_devices"] == [core(1, 0), core(3, 0)]
    assert model_parallel["outputs"] == [model_parallel["expected"]] * 2


@pytest.mark.multi_worker
def test_one_replica_of_all_32_cores(pod):
    whole = pod["whole"]
    assert whole["cores"] == whole["named"]
    assert sorted(whole["cores"][0]) == sorted(core(t, c) for t in range(4) for c in range(8))
    assert whole["replicas"] == [1, 1, 0]
    assert whole["contexts"] == [[1, 0, 1]]
    assert whole["fed"] == [0]
    assert whole["output_devices"] == [core(0, 0)]


# -- Replicas that go to hosts out of order -------------------------------------


@pytest.mark.multi_worker
def test_tfs_default_build_goes_from_host_to_host_and_runs(pod):
    default = pod["default"]
    assert default["cores"] == default["named"]
    assert [task_of(d) for d in default["replica_devices"]] == (
        [0] * 4 + [1] * 4 + [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4 + [2] * 4 + [3] * 4
    )
    assert default["replicas"] == [32, 4, 8]
    assert default["contexts"] == [[4, host, 32] for host in range(4)]
    # As on a pod: replica r takes element r of the pipelines' outputs, so
    # replicas 4-7 (on host 1) are fed by host 0's pipeline.
    fed, input_devices = tpu_feed(default["replica_devices"])
    assert default["fed"] == fed == [100 * (r // 8) + r % 8 for r in range(32)]
    assert default["input_devices"] == input_devices
    assert default["output_devices"] == default["replica_devices"]
    assert default["all_reduce"] == [sum(range(32))] * 32


@pytest.mark.multi_worker
def test_pairs_of_a_chips_cores_go_round_the_torus_and_run(pod):
    pairs = pod["pairs"]
    assert pairs["cores"] == pairs["named"]
    assert [task_of(d) for d in pairs["replica_devices"]] == [
        0, 0, 1, 1, 1, 1, 0, 2, 3, 3, 3, 3, 2, 2, 2, 0
    ]
    assert pairs["replicas"] == [16, 4, 4]
    fed, input_devices = tpu_feed(pairs["replica_devices"])
    assert pairs["fed"] == fed
    assert pairs["input_devices"] == input_devices
    assert pairs["output_devices"] == pairs["replica_devices"]
    assert pairs["all_reduce"] == [sum(range(16))] * 16


# -- What a pod refuses, in TensorFlow's words ---------------------------------


@pytest.mark.multi_worker
def test_what_a_pod_refuses_fails_with_tfs_errors(pod):
    assert pod["too_big"] == [
        "ValueError",
        "requested 2 replicas but only 1 replicas with shape [4 4 1 2] and computation_stride "
        "[1 1 1 1] fit in a TPU mesh of shape [4 4 1 2]",
    ]
    # The TPU's compiler (tpu_rewrite_device_util.cc); host 2's first core is (0, 2, 0, 0).
    assert pod["twice"] == [
        "InvalidArgumentError",
        "'device_assignment' has duplicate device coordinate (0, 2, 0, 0)",
    ]
    assert pod["split_16"] == [
        "ValueError",
        "The product of `partition_dimensions` should be the same as the number of logical "
        "devices (=4). Received `partition_dimensions`=[1, 16],and their product is 16.",
    ]


def test_a_core_named_twice_on_a_pod_is_refused_before_any_host_starts():
    import tensorflow as tf

    from compat_distribute.testing import FakeTPUClusterResolver
    from compat_distribute.testing import FakeTPUStrategy

    resolver = FakeTPUClusterResolver("v3-32")
    topology = resolver.tpu_topology()
    first = topology.device_coordinates[3][0].tolist()
    assignment = tf.tpu.experimental.DeviceAssignment(topology, [[first], [first]])
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        FakeTPUStrategy(resolver, experimental_device_assignment=assignment)
    assert raised.value.message == "'device_assignment' has duplicate device coordinate (2, 2, 0, 0)"
    assert resolver.pod.running is False


def test_an_assignment_of_the_one_host_slice_is_refused_on_the_pod_naming_the_fix():
    import tensorflow as tf

    from compat_distribute.testing import FakeTPUClusterResolver
    from compat_distribute.testing import FakeTPUStrategy

    # The topology a hosts=1 v3-32 reports (its resolver would need 32 devices here).
    mesh = [4, 4, 1, 2]
    one_host = tf.tpu.experimental.Topology(
        mesh_shape=mesh, device_coordinates=topologies.device_coordinates(mesh, 1)
    )
    assignment = tf.tpu.experimental.DeviceAssignment.build(one_host, num_replicas=32)
    resolver = FakeTPUClusterResolver("v3-32")
    with pytest.raises(ValueError) as raised:
        FakeTPUStrategy(resolver, experimental_device_assignment=assignment)
    assert str(raised.value) == (
        "device_assignment was built for a TPU topology with mesh_shape=[4, 4, 1, 2] and "
        "1 task(s) x 32 cores, but this fake TPU is v3-32 with mesh_shape=[4, 4, 1, 2] "
        "(32 cores). Build it from this resolver's topology: "
        "DeviceAssignment.build(initialize_tpu_system(resolver), ...)."
    )
    assert resolver.pod.running is False


# -- The conformance behaviours on a pod (v4-16) -------------------------------

# The whole conformance run on one pod: 123 s on an idle 2-core machine, over 300 s
# at load 17. A test of it that stalls for 300 s has its stacks dumped.
CONFORMANCE_TIMEOUT_S = 900


@pytest.fixture(name="conformance_on_a_pod", scope="module")
def conformance_on_a_pod_fixture(tmp_path_factory):
    """tests/conformance run by one pytest process on a v4-16 (2 hosts of 4 cores; a
    v3-32 takes three times as long, tracing 32 replicas): one pod for all."""
    report = tmp_path_factory.mktemp("conformance") / "report.xml"
    result = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
            "-o", "faulthandler_timeout=300",
            "--fake-tpu-topology", "v4-16", f"--junitxml={report}",
            os.path.join(pod_helpers.TESTS, "conformance"),
        ],
        capture_output=True,
        text=True,
        timeout=deadlines.scaled(CONFORMANCE_TIMEOUT_S),
        cwd=pod_helpers.ROOT,
        env=pod_helpers.env(),
    )
    cases = ElementTree.parse(report).getroot().iter("testcase")
    outcomes = {
        f"{case.get('classname')}::{case.get('name')}": [child.tag for child in case]
        for case in cases
    }
    return result, outcomes


def _conformance_behaviours():
    """The behaviours' test names, as the README's table reads them."""
    path = os.path.join(pod_helpers.TESTS, "conformance", "conformance_table.py")
    spec = importlib.util.spec_from_file_location("conformance_table", path)
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    return {
        node.name
        for source in table.HERE.glob("test_conformance_*.py")
        for node in ast.parse(source.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


@pytest.mark.multi_worker
def test_the_conformance_behaviours_pass_on_a_pod(conformance_on_a_pod):
    result, outcomes = conformance_on_a_pod
    assert "tpu=fake (v4-16, 8 cores on 2 host processes)" in result.stdout, result.stdout[-3000:]
    assert result.returncode == 0, result.stdout[-5000:]
    # Every behaviour ran (some twice: packed and unpacked variables) and passed.
    ran = {name.split("::")[1].split("[")[0] for name in outcomes}
    assert _conformance_behaviours() <= ran
    problems = {"failure", "error", "skipped"}
    assert {name: tags for name, tags in outcomes.items() if problems & set(tags)} == {}
