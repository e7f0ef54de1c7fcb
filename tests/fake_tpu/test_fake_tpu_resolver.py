"""The fake TPU's resolver, topologies and device assignments."""


import pytest
import tensorflow as tf

from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import FakeTPUStrategy
from compat_distribute.testing import PRESETS
from compat_distribute.testing import fake_tpu
from compat_distribute.testing import initialize_tpu_system
from compat_distribute.testing import shutdown_tpu_system

from fake_tpu_helpers import CPU


@pytest.mark.parametrize(
    "topology, mesh, cores",
    [("v2-8", [2, 2, 1, 2], 8), ("v3-8", [2, 2, 1, 2], 8), ("v4-8", [2, 2, 1, 1], 4)],
)
def test_resolver_answers_as_a_one_host_tpu(topology, mesh, cores):
    resolver = FakeTPUClusterResolver(topology)
    assert isinstance(resolver, tf.distribute.cluster_resolver.ClusterResolver)
    assert list(PRESETS[topology].mesh_shape) == mesh
    assert resolver.num_accelerators() == {"TPU": cores}
    assert resolver.master() == ""
    assert resolver.cluster_spec().as_dict() == {}
    assert (resolver.task_type, resolver.task_id) == ("worker", 0)
    metadata = resolver.get_tpu_system_metadata()
    assert isinstance(metadata, tf.tpu.experimental.TPUSystemMetadata)
    assert (metadata.num_cores, metadata.num_hosts, metadata.num_of_cores_per_host) == (
        cores,
        1,
        cores,
    )
    assert metadata.topology is None  # As TF's: initialize_tpu_system gives the topology.
    assert [d.name for d in metadata.devices] == [CPU.format(i) for i in range(cores)]


def test_resolver_takes_any_mesh():
    resolver = FakeTPUClusterResolver(mesh_shape=(1, 2, 2, 2))
    assert resolver.num_accelerators() == {"TPU": 8}
    assert resolver.mesh_shape == (1, 2, 2, 2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(topology="v9-8"),
            "Unknown TPU topology 'v9-8'; the presets are 'v2-8', 'v3-8', 'v4-8', 'v5litepod-1'",
        ),
        (dict(mesh_shape=(2, 2, 1)), "got (2, 2, 1). For example mesh_shape=(2, 2, 1, 2)"),
        (
            dict(mesh_shape=(2, 2, 0, 2)),
            "four positive ints (x, y, z, cores_per_chip); got (2, 2, 0, 2)",
        ),
        (dict(mesh_shape=(2, 2, 1, 2.0)), "got (2, 2, 1, 2.0)"),
        (dict(mesh_shape=(2, True, 1, 2)), "got (2, True, 1, 2)"),
        (dict(mesh_shape=8), "got 8."),
        (dict(topology="v4-8", mesh_shape=(2, 2, 1, 2)), "Pass either topology= or mesh_shape="),
        (dict(device_type="TPU"), "device_type must be one of ('CPU', 'GPU'); got 'TPU'"),
        (
            dict(job_name=""),  # was taken, giving master() == ""
            "job_name must be a non-empty str, the job of the TPU's workers (TensorFlow's "
            "default 'worker'); got ''. Leave job_name out for 'worker'.",
        ),
    ],
)
def test_bad_resolver_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError) as info:
        FakeTPUClusterResolver(**kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "topology, close",
    [("V3-8", "v3-8"), ("v3_8", "v3-8"), (" v4-16", "v4-16"), ("v5e-8", "v5litepod-8")],
)
def test_a_preset_spelled_another_way_is_named(topology, close):
    presets = ", ".join(repr(name) for name in PRESETS)
    with pytest.raises(ValueError) as info:
        fake_tpu(topology)
    assert str(info.value) == (
        f"Unknown TPU topology {topology!r} (did you mean {close!r}?); the presets are "
        f"{presets}. Pass mesh_shape=(x, y, z, cores_per_chip) for another mesh."
    )
    with pytest.raises(TypeError) as info:
        FakeTPUClusterResolver(8)
    assert str(info.value) == (
        f"topology must be a preset name (one of {presets}); got 8 (int). Pass "
        f"mesh_shape=(x, y, z, cores_per_chip) for another mesh."
    )


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        (("v5-9",), {}, ValueError, "Unknown TPU topology 'v5-9'"),
        (
            (),
            dict(device_type="TPU"),
            ValueError,
            "device_type must be one of ('CPU', 'GPU'); got 'TPU'",
        ),
        ((), dict(strict="yes"), TypeError, "strict must be True or False; got 'yes'."),
    ],
)
def test_bad_fake_tpu_arguments_raise_before_patching(args, kwargs, error, message):
    before = tf.distribute.TPUStrategy
    with pytest.raises(error) as info:
        fake_tpu(*args, **kwargs)
    assert message in str(info.value)
    assert tf.distribute.TPUStrategy is before


def test_a_mesh_with_3_cores_a_chip_is_refused_naming_the_counts_chips_have():
    with pytest.raises(ValueError) as info:
        FakeTPUClusterResolver(mesh_shape=(2, 2, 1, 3))
    assert str(info.value) == (
        "mesh_shape's cores_per_chip (its 4th value) must be 1 or 2: TensorFlow sees 2 cores "
        "on a v2 or v3 chip and 1 on a v4, v5e, v5p or v6e chip; got 3 in mesh_shape=(2, 2, 1, "
        "3). Pass (x, y, z, 2) for v2/v3-like chips or (x, y, z, 1) for later ones, e.g. "
        "mesh_shape=(2, 2, 1, 2), a v3-8."
    )


@pytest.mark.parametrize(
    "topology, hosts, choices",
    [
        ("v3-32", "4", "hosts=4 (its hosts) or hosts=1 (one process)"),
        ("v3-8", "1", "hosts=1"),
        ("v3-32", 4.0, "hosts=4 (its hosts) or hosts=1 (one process)"),
    ],
)
def test_a_host_count_that_is_not_an_int_is_refused_as_such(topology, hosts, choices):
    before = tf.distribute.TPUStrategy
    with pytest.raises(TypeError) as info:
        FakeTPUClusterResolver(topology, hosts=hosts)
    with pytest.raises(TypeError) as patched:
        fake_tpu(topology, hosts=hosts)
    assert str(info.value) == str(patched.value) == (
        f"hosts must be an int or None, not a {type(hosts).__name__}; got {hosts!r}. For the "
        f"TPU slice {topology!r} pass {choices}, or leave hosts out for the slice's own hosts."
    )
    assert tf.distribute.TPUStrategy is before


def test_more_cores_than_the_started_runtime_has_is_a_clear_runtime_error():
    assert len(tf.config.list_logical_devices("CPU")) == 8  # starts the runtime
    with pytest.raises(RuntimeError) as info:
        FakeTPUClusterResolver(mesh_shape=(2, 2, 2, 2))
    assert "set_virtual_devices(16, 'CPU') came too late" in str(info.value)
    assert "already initialised with 8 logical CPU device(s)" in str(info.value)


def test_gpu_cores_without_a_gpu_is_a_clear_runtime_error():
    assert not tf.config.list_physical_devices("GPU")
    with pytest.raises(RuntimeError) as info:
        FakeTPUClusterResolver(device_type="GPU")
    assert str(info.value) == (
        "set_virtual_devices(8, 'GPU'): this machine has no physical GPU device visible "
        "to TensorFlow. Use device_type='CPU'."
    )


# The TPU system and device assignments.


def test_initialize_returns_a_real_topology_for_device_assignment():
    resolver = FakeTPUClusterResolver("v3-8")
    assert resolver.tpu_hardware_feature is None
    topology = initialize_tpu_system(resolver)
    assert isinstance(topology, tf.tpu.experimental.Topology)
    assert topology.mesh_shape.tolist() == [2, 2, 1, 2]
    assert (topology.num_tasks, topology.num_tpus_per_task) == (1, 8)
    # Every core has its own coordinates; the two cores of a chip are adjacent.
    coords = topology.device_coordinates[0].tolist()
    assert len({tuple(c) for c in coords}) == 8
    assert coords[:2] == [[0, 0, 0, 0], [0, 0, 0, 1]]
    assert resolver.tpu_hardware_feature is not None  # As TF's, set by initialization.
    assignment = tf.tpu.experimental.DeviceAssignment.build(
        topology, computation_shape=[1, 1, 1, 2], num_replicas=4
    )
    assert (assignment.num_replicas, assignment.num_cores_per_replica) == (4, 2)
    shutdown_tpu_system(resolver)
    assert resolver.tpu_hardware_feature is None


def test_device_assignment_of_the_whole_mesh():
    resolver = FakeTPUClusterResolver(mesh_shape=[1, 2, 2, 2])
    topology = initialize_tpu_system(resolver)
    assignment = tf.tpu.experimental.DeviceAssignment.build(
        topology, computation_shape=[1, 2, 2, 2], num_replicas=1
    )
    assert sorted(assignment.tpu_ordinal(0, c) for c in range(8)) == list(range(8))


def test_system_calls_refuse_a_real_resolver():
    real = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}))
    with pytest.raises(
        TypeError, match="must be a compat_distribute.testing.FakeTPUClusterResolver"
    ):
        initialize_tpu_system(real)


def test_device_assignment_of_another_fake_is_a_value_error():
    v3_topology = initialize_tpu_system(FakeTPUClusterResolver("v3-8"))
    assignment = tf.tpu.experimental.DeviceAssignment.build(
        v3_topology, computation_shape=[1, 1, 1, 1], num_replicas=8
    )
    with pytest.raises(ValueError) as info:
        FakeTPUStrategy(FakeTPUClusterResolver("v4-8"), experimental_device_assignment=assignment)
    assert str(info.value) == (
        "device_assignment was built for a TPU topology with mesh_shape=[2, 2, 1, 2] and "
        "1 task(s) x 8 cores, but this fake TPU is v4-8 with mesh_shape=[2, 2, 1, 1] "
        "(4 cores). Build it from this resolver's topology: "
        "DeviceAssignment.build(initialize_tpu_system(resolver), ...)."
    )


def test_a_core_named_twice_is_tfs_invalid_argument_error():
    # More replicas than cores name some core twice: the TPU's compiler refuses it
    # (tpu_rewrite_device_util.cc), in its words.
    resolver = FakeTPUClusterResolver("v4-8")
    topology = initialize_tpu_system(resolver)
    assignment = tf.tpu.experimental.DeviceAssignment(topology, [[[0, 0, 0, 0]]] * 5)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        FakeTPUStrategy(resolver, experimental_device_assignment=assignment)
    assert info.value.message == "'device_assignment' has duplicate device coordinate (0, 0, 0, 0)"
    # Also a logical core other than 0 (the fake computes on core 0 only).
    two_cores = tf.tpu.experimental.DeviceAssignment(
        topology, [[[0, 0, 0, 0], [1, 0, 0, 0]], [[1, 0, 0, 0], [0, 1, 0, 0]]]
    )
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        FakeTPUStrategy(resolver, experimental_device_assignment=two_cores)
    assert info.value.message == "'device_assignment' has duplicate device coordinate (1, 0, 0, 0)"


def test_a_coordinate_off_the_mesh_is_refused_as_on_a_tpu():
    resolver = FakeTPUClusterResolver("v4-8")
    topology = initialize_tpu_system(resolver)
    # Past the mesh: TF's DeviceAssignment fails to look its task up, with
    # IndexError (numpy's bare "index 2 is out of bounds for axis 0 with size 2").
    with pytest.raises(IndexError) as info:
        tf.tpu.experimental.DeviceAssignment(topology, [[[2, 0, 0, 0]]])
    assert str(info.value) == (
        "DeviceAssignment: core_assignment names the device coordinate (2, 0, 0, 0), outside "
        "of mesh shape (2, 2, 1, 1) (x, y, z, core: each from 0 to its size - 1). Take "
        "coordinates from topology.device_coordinates, or let tf.tpu.experimental."
        "DeviceAssignment.build(topology, computation_shape=..., num_replicas=...) choose them."
    )
    # Negative: the lookup wraps round; the TPU's compiler refuses it.
    negative = tf.tpu.experimental.DeviceAssignment(topology, [[[-1, 0, 0, 0]]])
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        FakeTPUStrategy(resolver, experimental_device_assignment=negative)
    assert info.value.message == (
        "device coordinate (-1, 0, 0, 0) in 'device_assignment' is outside of mesh shape "
        "(2, 2, 1, 1)"
    )


# The strategy.


