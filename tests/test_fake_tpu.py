"""The fake TPU on the session's 8 virtual CPUs (16 cores in a subprocess)."""

import gc
import warnings

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import tpu_strategy as tf_tpu_strategy

import compat_distribute
from compat_distribute import _patching
from compat_distribute.testing import _fake_tpu as fake_tpu_lib
from compat_distribute.testing import FakeTPU
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import FakeTPUStrategy
from compat_distribute.testing import TOPOLOGIES
from compat_distribute.testing import fake_tpu
from compat_distribute.testing import initialize_tpu_system
from compat_distribute.testing import shutdown_tpu_system

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"

# TensorFlow's texts, copied from tensorflow/python/distribute/tpu_strategy.py.
EAGER_RUN_ERROR = (
    "TPUStrategy.run(fn, ...) does not support pure eager "
    "execution. please make sure the function passed into "
    "`strategy.run` is a `tf.function` or "
    "`strategy.run` is called inside a `tf.function` if "
    "eager behavior is enabled."
)
SPMD_ASSIGN_ERROR = (
    "Cannot assign a tensor to a logical device in SPMD mode. To disable "
    "SPMD, Please construct the TPUStrategy with "
    "`experimental_spmd_xla_partitioning=False`"
)


def values(per_replica, strategy):
    return [np.asarray(t).tolist() for t in strategy.experimental_local_results(per_replica)]


@pytest.fixture(autouse=True, scope="module")
def free_iterators_before_exit():
    """Torn down last: frees the module's strategies and the iterators their step
    loops capture while TensorFlow still runs. Left to the interpreter's exit,
    each iterator's destructor waits for its tf.data autotune thread (a minute
    or more)."""
    yield
    gc.collect()


@pytest.fixture(name="v3_8", scope="module")
def v3_8_fixture():
    return FakeTPUStrategy(FakeTPUClusterResolver("v3-8"))


@pytest.fixture(name="v4_8", scope="module")
def v4_8_fixture():
    return FakeTPUStrategy(FakeTPUClusterResolver("v4-8"))


@pytest.fixture(name="model_parallel", scope="module")
def model_parallel_fixture():
    """4 replicas x 2 logical cores on a v3-8."""
    resolver = FakeTPUClusterResolver("v3-8")
    assignment = tf.tpu.experimental.DeviceAssignment.build(
        initialize_tpu_system(resolver), computation_shape=[1, 1, 1, 2], num_replicas=4
    )
    return FakeTPUStrategy(resolver, experimental_device_assignment=assignment)


@pytest.fixture(name="spmd", scope="module")
def spmd_fixture():
    """1 replica x 8 logical cores, SPMD partitioning."""
    resolver = FakeTPUClusterResolver(mesh_shape=[1, 2, 2, 2])
    assignment = tf.tpu.experimental.DeviceAssignment.build(
        initialize_tpu_system(resolver), computation_shape=[1, 2, 2, 2], num_replicas=1
    )
    return FakeTPUStrategy(
        resolver, experimental_device_assignment=assignment, experimental_spmd_xla_partitioning=True
    )


@pytest.fixture(name="v1_steps", scope="module")
def v1_steps_fixture():
    return compat_distribute.TPUStrategy(FakeTPUClusterResolver("v3-8"), steps_per_run=4)


# The resolver.


@pytest.mark.parametrize(
    "topology, mesh, cores",
    [("v2-8", [2, 2, 1, 2], 8), ("v3-8", [2, 2, 1, 2], 8), ("v4-8", [2, 2, 1, 1], 4)],
)
def test_resolver_answers_as_a_one_host_tpu(topology, mesh, cores):
    resolver = FakeTPUClusterResolver(topology)
    assert isinstance(resolver, tf.distribute.cluster_resolver.ClusterResolver)
    assert list(TOPOLOGIES[topology]) == mesh
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
            "Unknown TPU topology 'v9-8'; the presets are 'v2-8', 'v3-8', 'v4-8'.",
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
    ],
)
def test_bad_resolver_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError) as info:
        FakeTPUClusterResolver(**kwargs)
    assert message in str(info.value)


def test_bad_fake_tpu_arguments_raise_before_patching():
    before = tf.distribute.TPUStrategy
    with pytest.raises(ValueError, match="Unknown TPU topology 'v5-9'"):
        fake_tpu("v5-9")
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


def test_device_assignment_needing_more_cores_is_a_value_error():
    resolver = FakeTPUClusterResolver("v4-8")
    topology = initialize_tpu_system(resolver)
    assignment = tf.tpu.experimental.DeviceAssignment(topology, [[[0, 0, 0, 0]]] * 5)
    with pytest.raises(ValueError) as info:
        FakeTPUStrategy(resolver, experimental_device_assignment=assignment)
    assert str(info.value) == (
        "device_assignment needs 5 replicas x 1 cores = 5 cores, but this fake TPU (v4-8) has 4."
    )


# The strategy.


def test_strategy_has_one_replica_per_core(v3_8):
    assert v3_8.num_replicas_in_sync == 8
    assert v3_8.extended.worker_devices == tuple(CPU.format(i) for i in range(8))
    assert (v3_8.extended.num_hosts, v3_8.extended.num_replicas_per_host) == (1, 8)
    assert v3_8.extended.steps_per_run == 1
    assert v3_8.extended.experimental_require_static_shapes
    assert isinstance(v3_8.cluster_resolver, FakeTPUClusterResolver)


def test_strategy_is_no_tpu_strategy_class(v3_8):
    # Else TensorFlow and Keras would emit TPU-only ops.
    for klass in (
        tf_tpu_strategy.TPUStrategyV2,
        tf_tpu_strategy.TPUStrategy,
        tf_tpu_strategy.TPUStrategyV1,
        compat_distribute.TPUStrategy,
    ):
        assert not isinstance(v3_8, klass)
    assert not isinstance(v3_8.extended, tf_tpu_strategy.TPUExtended)
    assert not any(k.__name__.startswith("TPUStrategy") for k in type(v3_8).__mro__)


def test_run_gives_per_replica_results_and_all_reduce_sums(v3_8):
    @tf.function
    def step():
        def replica_fn():
            ctx = tf.distribute.get_replica_context()
            rid = tf.cast(ctx.replica_id_in_sync_group, tf.float32)
            return rid * 10.0, ctx.all_reduce(tf.distribute.ReduceOp.SUM, rid)

        return v3_8.run(replica_fn)

    ids, sums = step()
    assert values(ids, v3_8) == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]
    assert values(sums, v3_8) == [28.0] * 8
    assert float(v3_8.reduce(tf.distribute.ReduceOp.SUM, ids, axis=None)) == 280.0


def double_positive(x):
    # Defined outside the tf.function, so only run's own AutoGraph call
    # converts it.
    if x > 0:  # a tensor condition: needs AutoGraph, as on a TPU
        return x * 2.0
    return -x


def test_step_functions_are_converted_by_autograph(v3_8):
    @tf.function
    def step(x):
        return v3_8.run(double_positive, args=(x,))

    assert values(step(tf.constant(3.0)), v3_8) == [6.0] * 8
    assert values(step(tf.constant(-3.0)), v3_8) == [3.0] * 8


def test_run_accepts_a_tf_function_eagerly(v3_8):
    @tf.function
    def replica_fn(x):
        return x * 2

    assert values(v3_8.run(replica_fn, args=(tf.constant(3.0),)), v3_8) == [6.0] * 8


def test_run_refuses_an_eager_python_function_as_a_tpu(v3_8):
    with pytest.raises(NotImplementedError) as info:
        v3_8.run(lambda: tf.constant(1.0))
    assert str(info.value) == EAGER_RUN_ERROR


def test_run_refuses_too_many_positional_arguments_as_a_tpu(v3_8):
    @tf.function
    def step(x):
        return v3_8.run(lambda x: x, args=(x, x))

    with pytest.raises(
        ValueError, match=r"Too many positional arguments passed to call to TPUStrategy\.run\(\)\."
    ):
        step(tf.constant(1.0))


def test_run_refuses_variables_in_star_args_as_a_tpu(v3_8):
    with v3_8.scope():
        v = tf.Variable(1.0)

    @tf.function
    def replica_fn(*xs):
        return xs[0] * 2.0

    for _ in range(2):  # also once its arity is known
        with pytest.raises(ValueError) as info:
            v3_8.run(replica_fn, args=(v,))
        assert str(info.value) == (
            "TPUStrategy.run() cannot handle Variables passed to *args. Either name the "
            "function argument, or capture the Variable implicitly."
        )


def test_variables_are_mirrored_on_every_replica(v3_8):
    with v3_8.scope():
        v = tf.Variable(1.0)
    assert [x.device for x in v.values] == [CPU.format(i) for i in range(8)]

    @tf.function
    def step():
        def replica_fn():
            ctx = tf.distribute.get_replica_context()
            v.assign_add(ctx.all_reduce("SUM", 1.0))

        v3_8.run(replica_fn)

    step()
    assert [float(x.numpy()) for x in v.values] == [9.0] * 8


def test_v4_8_uses_the_first_four_devices(v4_8):
    assert v4_8.num_replicas_in_sync == 4
    assert v4_8.extended.worker_devices == tuple(CPU.format(i) for i in range(4))

    @tf.function
    def step():
        return v4_8.run(lambda: tf.distribute.get_replica_context().all_reduce("SUM", 1.0))

    assert values(step(), v4_8) == [4.0] * 4


def test_device_assignment_sets_replicas_and_logical_cores(model_parallel):
    assert model_parallel.num_replicas_in_sync == 4
    # Replica r's cores are the devices of the assignment's TPU ordinals.
    assert model_parallel.extended._tpu_devices.shape == (4, 2)  # pylint: disable=protected-access
    assignment = model_parallel.extended._device_assignment  # pylint: disable=protected-access
    for r in range(4):
        for c in range(2):
            assert model_parallel.extended._tpu_devices[
                r, c
            ] == CPU.format(  # pylint: disable=protected-access
                assignment.tpu_ordinal(replica=r, logical_core=c)
            )
    assert (model_parallel.extended.num_hosts, model_parallel.extended.num_replicas_per_host) == (
        1,
        4,
    )

    @tf.function
    def step():
        return model_parallel.run(
            lambda: tf.distribute.get_replica_context().all_reduce("SUM", 1.0)
        )

    assert values(step(), model_parallel) == [4.0] * 4


def test_experimental_logical_device_places_variables_on_that_core(model_parallel):
    core1 = tuple(model_parallel.extended._tpu_devices[:, 1])  # pylint: disable=protected-access
    with model_parallel.scope(), model_parallel.extended.experimental_logical_device(1):
        assert model_parallel.extended.worker_devices == core1
        v = tf.Variable(2.0)
    assert tuple(x.device for x in v.values) == core1
    with pytest.raises(ValueError) as info:
        with model_parallel.extended.experimental_logical_device(2):
            pass
    assert str(info.value) == (
        "`logical_device_id` not in range (was 2, but there are only 2 logical devices per replica)."
    )


def test_logical_device_annotations_run_as_on_a_tpu(model_parallel):
    @tf.function
    def step(x):
        def replica_fn(x):
            x = model_parallel.experimental_split_to_logical_devices(x, [1, 2])
            x = model_parallel.experimental_assign_to_logical_device(x, 1)
            return model_parallel.experimental_replicate_to_logical_devices(x) * 2.0

        return model_parallel.run(replica_fn, args=(x,))

    x = tf.reshape(tf.range(8, dtype=tf.float32), [2, 4])
    assert values(step(x), model_parallel) == [(np.arange(8).reshape(2, 4) * 2.0).tolist()] * 4
    # The annotations are TF's XlaSharding ops, in each of the 4 replicas.
    graph = step.get_concrete_function(x).graph
    sharding_ops = [op for op in graph.get_operations() if op.type == "XlaSharding"]
    sharding_ops += [
        op
        for f in graph.as_graph_def().library.function
        for op in f.node_def
        if op.op == "XlaSharding"
    ]
    assert len(sharding_ops) == 3 * 4


@pytest.mark.parametrize(
    "shape, dims, message",
    [
        (
            [2, 4],
            [2],
            "Length of `partition_dimensions` must equal to the rank of `tensor.shape` (2). "
            "Received len(partition_dimensions)=1.",
        ),
        (
            [2, 3],
            [1, 2],
            "Tensor shape at `partition_dimensions[1]` must be divisible by corresponding value "
            "specified by `partition_dimensions` (2). Received: 3.",
        ),
        (
            [2, 4],
            [1, 4],
            "The product of `partition_dimensions` should be the same as the number of logical "
            "devices (=2). Received `partition_dimensions`=[1, 4],and their product is 4.",
        ),
    ],
)
def test_split_to_logical_devices_validates_as_a_tpu(model_parallel, shape, dims, message):
    @tf.function
    def step():
        return model_parallel.experimental_split_to_logical_devices(tf.ones(shape), dims)

    with pytest.raises(ValueError) as info:
        step()
    assert message in str(info.value)


def test_assign_to_logical_device_validates_as_a_tpu(model_parallel, spmd):
    @tf.function
    def step(strategy, core):
        return strategy.experimental_assign_to_logical_device(tf.ones([2]), core)

    with pytest.raises(ValueError) as info:
        step(model_parallel, 2)
    assert (
        "`logical_core_id` to assign must be lower then total number of logical devices per "
        "replica. Received logical device id 2 but there are only total of 2 logical devices "
        "in replica."
    ) in str(info.value)
    with pytest.raises(ValueError) as info:
        step(spmd, 0)
    assert SPMD_ASSIGN_ERROR in str(info.value)


# Input as on a TPU.


def test_partial_batches_of_a_dynamic_batch_dimension_are_padded_per_replica(v3_8):
    dataset = tf.data.Dataset.range(10).batch(8)  # batch dimension None
    iterator = iter(v3_8.experimental_distribute_dataset(dataset))
    assert values(next(iterator), v3_8) == [[i] for i in range(8)]
    assert values(next(iterator), v3_8) == [[8], [9]] + [[]] * 6


def test_per_replica_input_mode_is_refused_as_on_a_tpu(v3_8):
    options = tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA
    )
    with pytest.raises(NotImplementedError) as info:
        v3_8.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(8), options)
    assert str(info.value) == (
        "InputReplicationMode.PER_REPLICA is only supported in "
        "`experimental_distribute_datasets_from_function`."
    )
    with pytest.raises(NotImplementedError) as info:
        v3_8.distribute_datasets_from_function(lambda ctx: tf.data.Dataset.range(8), options)
    assert str(info.value) == (
        "InputReplicationMode.PER_REPLICA is only supported in  "
        "`experimental_distribute_datasets_from_function` of tf.distribute.MirroredStrategy"
    )


def test_ragged_input_with_device_prefetch_is_refused_as_on_a_tpu(v3_8):
    ragged = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1], [2, 3]] * 8)).batch(8)
    with pytest.raises(
        ValueError, match="TPUStrategy does not support distributed datasets with device prefetch"
    ):
        v3_8.experimental_distribute_dataset(ragged)
    no_prefetch = tf.distribute.InputOptions(experimental_fetch_to_device=False)
    v3_8.experimental_distribute_dataset(ragged, no_prefetch)  # accepted, as on a TPU


# Steps on the device.


def make_counter(strategy):
    with strategy.scope():
        return tf.Variable(0, dtype=tf.int64, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


def test_run_steps_runs_steps_per_run_steps_on_the_device(v1_steps):
    counter = make_counter(v1_steps)
    dataset = tf.data.Dataset.range(1000).batch(8, drop_remainder=True)
    iterator = iter(v1_steps.experimental_distribute_dataset(dataset))

    def step(x):
        counter.assign_add(1)
        return tf.distribute.get_replica_context().all_reduce("SUM", x)

    out = v1_steps.run_steps(step, iterator)  # steps_per_run = 4 steps: batches 0..3
    assert counter.numpy() == 4
    assert values(out, v1_steps) == [[sum(range(24, 32))]] * 8
    out = v1_steps.run_steps(step, iterator, steps=2)  # batches 4, 5
    assert counter.numpy() == 6
    assert values(out, v1_steps) == [[sum(range(40, 48))]] * 8
    # Exactly 6 batches were consumed.
    assert values(next(iterator), v1_steps) == [[48 + i] for i in range(8)]
    with pytest.raises(ValueError, match=r"steps must be a positive int \(>= 1\); got 0 \(int\)"):
        v1_steps.run_steps(step, iterator, steps=0)


def test_run_steps_on_iterator_runs_iterations_on_the_device(v1_steps):
    counter = make_counter(v1_steps)
    iterator = v1_steps.make_dataset_iterator(
        tf.data.Dataset.range(1000).batch(8, drop_remainder=True)
    )

    def replica_fn(x):
        counter.assign_add(1)
        return x

    def step(ctx, inputs):
        out = v1_steps.extended.call_for_each_replica(replica_fn, args=(inputs,))
        ctx.set_last_step_output("x", out)
        return out

    ctx = v1_steps.extended.experimental_run_steps_on_iterator(step, iterator, iterations=3)
    assert counter.numpy() == 3
    assert int(ctx.run_op) == 3
    assert values(ctx.last_step_outputs["x"], v1_steps) == [[16 + i] for i in range(8)]
    with pytest.raises(
        ValueError, match=r"iterations must be a positive int \(>= 1\); got 0 \(int\)"
    ):
        v1_steps.extended.experimental_run_steps_on_iterator(step, iterator, iterations=0)


# The V1 signature and member table.


def test_v1_tpu_strategy_builds_the_fake(v1_steps):
    assert isinstance(v1_steps, FakeTPUStrategy)
    assert v1_steps.steps_per_run == v1_steps.extended.steps_per_run == 4
    with pytest.warns(DeprecationWarning, match="experimental_run_v2 is deprecated; use run"):
        assert v1_steps.experimental_run_v2 == v1_steps.run
    assert not hasattr(v1_steps, "experimental_make_numpy_iterator")
    assert v1_steps.initialize() == [] and v1_steps.finalize() == []


def test_v1_tpu_strategy_with_device_assignment():
    resolver = FakeTPUClusterResolver("v3-8")
    assignment = tf.tpu.experimental.DeviceAssignment.build(
        initialize_tpu_system(resolver), computation_shape=[1, 1, 1, 2], num_replicas=4
    )
    strategy = compat_distribute.TPUStrategy(
        resolver, steps_per_run=2, device_assignment=assignment
    )
    assert strategy.cluster_resolver is resolver
    assert strategy.num_replicas_in_sync == 4
    assert strategy.extended.steps_per_run == 2
    with pytest.raises(ValueError, match=r"steps_per_run must be a positive int \(>= 1\); got 0"):
        compat_distribute.TPUStrategy(resolver, steps_per_run=0)


# Strict mode: the XLA compile check runs the first time each step is traced.


def _bad_replica_fn(x):
    as_text = tf.strings.as_string(x)  # no XLA kernel
    doubled = tf.cast(x, tf.float64) * 2.0  # float64: no TPU support
    return tf.cast(doubled, tf.float32) + tf.cast(tf.strings.length(as_text), tf.float32)


def _clean_replica_fn(x, w):
    loss = tf.reduce_sum(x * w)
    total = tf.distribute.get_replica_context().all_reduce("SUM", loss)
    w.assign_sub(0.1 * total)
    return total


def _train(strategy):
    with strategy.scope():
        w = tf.Variable(1.0)
    dataset = tf.data.Dataset.range(32).map(lambda i: tf.cast(i, tf.float32)).batch(8)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    totals = strategy.run_steps(lambda x: _clean_replica_fn(x, w), iterator, steps=3)
    return [float(t) for t in strategy.experimental_local_results(totals)], float(w.numpy())


def test_strict_mode_refuses_a_bad_step_listing_every_problem():
    from compat_distribute.testing import TPUCompatibilityError

    strict = FakeTPUStrategy(FakeTPUClusterResolver("v4-8", strict=True))

    @tf.function
    def step(x):
        return strict.run(_bad_replica_fn, args=(x,))

    with pytest.raises(TPUCompatibilityError) as info:
        step(tf.constant(1.0))
    message = str(info.value)
    # One entry per offending line, though each op exists once per replica.
    assert "_bad_replica_fn: 2 TPU problem(s)" in message
    assert "XLA has no kernel for AsString" in message
    assert "No registered 'AsString' OpKernel for XLA_CPU_JIT devices" in message  # TF's own text
    assert "produces float64, which the TPU does not support" in message
    source_lines = {(p.filename, p.lineno) for p in info.value.report.problems}
    first = _bad_replica_fn.__code__.co_firstlineno
    assert source_lines == {(__file__, first + 1), (__file__, first + 2)}
    lenient = FakeTPUStrategy(FakeTPUClusterResolver("v4-8", strict=False))

    @tf.function
    def lenient_step(x):
        return lenient.run(_bad_replica_fn, args=(x,))

    # 2 * 1.0 + len("1.000000"): the lenient fake runs what a TPU would refuse.
    assert [float(v) for v in lenient.experimental_local_results(lenient_step(1.0))] == [10.0] * 4


def test_strict_mode_is_off_by_default():
    assert FakeTPUClusterResolver().strict is False
    assert fake_tpu().resolver().strict is False
    assert FakeTPUClusterResolver(strict=True).strict is True


def test_strict_mode_runs_a_clean_step_as_non_strict_mode_does():
    strict = compat_distribute.TPUStrategy(FakeTPUClusterResolver("v4-8", strict=True))
    lenient = compat_distribute.TPUStrategy(FakeTPUClusterResolver("v4-8"))
    assert _train(strict) == _train(lenient)
    totals, w = _train(strict)
    # Per step: total = sum(batch) * w on every replica, then w -= 0.1 * total.
    # Batches sum to 28, 92, 156: w = 1 -> -1.8 -> 14.76 -> -215.496.
    assert totals == [pytest.approx(156 * 14.76)] * 4
    assert w == pytest.approx(-215.496)


# fake_tpu(): unmodified TPU code.


def patched_names():
    return {
        (path, name): getattr(_patching.tf_object(path), name)
        for path, name, _ in fake_tpu()._routes()  # pylint: disable=protected-access
    }


def test_fake_tpu_routes_tensorflow_and_restores_it_exactly():
    before = patched_names()
    fake = fake_tpu("v4-8")
    with fake:
        assert fake.active
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu="my-tpu", zone="us-central1-b"
        )
        assert isinstance(resolver, FakeTPUClusterResolver)
        assert isinstance(resolver, tf.distribute.cluster_resolver.TPUClusterResolver)
        assert resolver.num_accelerators() == {"TPU": 4}
        assert tf.config.experimental_connect_to_cluster(resolver) is None
        topology = tf.tpu.experimental.initialize_tpu_system(resolver)
        assert topology.mesh_shape.tolist() == [2, 2, 1, 1]
        strategy = tf.distribute.TPUStrategy(resolver)
        assert isinstance(strategy, tf.distribute.TPUStrategy)
        assert strategy.num_replicas_in_sync == 4
        assert tf.distribute.TPUStrategy().num_replicas_in_sync == 4  # default resolver
        old = tf.distribute.experimental.TPUStrategy(resolver, device_assignment=None)
        assert old.num_replicas_in_sync == 4
        v1 = tf.compat.v1.distribute.experimental.TPUStrategy(resolver, steps_per_run=3)
        assert isinstance(v1, tf.compat.v1.distribute.experimental.TPUStrategy)
        assert v1.extended.steps_per_run == 3
        tf.tpu.experimental.shutdown_tpu_system(resolver)
        assert before != patched_names()
    assert not fake.active
    after = patched_names()
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)


def test_fake_tpu_start_stop_and_nesting():
    outer = fake_tpu("v3-8").start()
    try:
        assert isinstance(outer, FakeTPU)
        with fake_tpu("v4-8"):
            assert tf.distribute.cluster_resolver.TPUClusterResolver().num_accelerators() == {
                "TPU": 4
            }
        assert tf.distribute.cluster_resolver.TPUClusterResolver().num_accelerators() == {"TPU": 8}
    finally:
        outer.stop()
    assert (
        tf.distribute.cluster_resolver.TPUClusterResolver is not outer._resolver_class
    )  # pylint: disable=protected-access


def test_tpu_strategy_docstring_split_example_runs_verbatim():
    # `inputs` and `model` are what the example leaves to the reader.
    inputs = tf.data.Dataset.from_tensors(tf.reshape(tf.range(192.0), [2, 4, 8, 3])).repeat()

    def model(x):
        return tf.reduce_sum(x, axis=[1, 2, 3])

    with fake_tpu(mesh_shape=[1, 2, 2, 2]):
        # From TPUStrategyV2.experimental_split_to_logical_devices, verbatim:
        # Initializing TPU system with 8 logical devices and 1 replica.
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
        tf.config.experimental_connect_to_cluster(resolver)
        topology = tf.tpu.experimental.initialize_tpu_system(resolver)
        device_assignment = tf.tpu.experimental.DeviceAssignment.build(
            topology, computation_shape=[1, 2, 2, 2], num_replicas=1
        )
        # Construct the TPUStrategy. Since we are going to split the image across
        # logical devices, here we set `experimental_spmd_xla_partitioning=True`
        # so that the partitioning can be compiled in SPMD mode, which usually
        # results in faster compilation and smaller HBM requirement if the size of
        # input and activation tensors are much bigger than that of the model
        # parameters. Note that this flag is suggested but not a hard requirement
        # for `experimental_split_to_logical_devices`.
        strategy = tf.distribute.TPUStrategy(
            resolver,
            experimental_device_assignment=device_assignment,
            experimental_spmd_xla_partitioning=True,
        )

        iterator = iter(inputs)

        @tf.function()
        def step_fn(inputs):
            inputs = strategy.experimental_split_to_logical_devices(inputs, [1, 2, 4, 1])

            # model() function will be executed on 8 logical devices with `inputs`
            # split 2 * 4  ways.
            output = model(inputs)
            return output

        result = strategy.run(step_fn, args=(next(iterator),))
        # (end of the example)
        assert strategy.num_replicas_in_sync == 1
    per_image = np.arange(192.0).reshape(2, 96).sum(axis=1)
    assert np.asarray(result).tolist() == per_image.tolist()


def test_tpu_strategy_class_docstring_keras_example_runs_verbatim():
    # Seeded: with some draws of data and kernel, every gradient is clipped to 0.
    tf.keras.utils.set_random_seed(1)
    with fake_tpu("v3-8"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras on input_shape=
        # From TPUStrategyV2's docstring, verbatim:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)

        with strategy.scope():
            model = tf.keras.Sequential(
                [
                    tf.keras.layers.Dense(2, input_shape=(5,)),
                ]
            )
            optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)

        def dataset_fn(ctx):
            x = np.random.random((2, 5)).astype(np.float32)
            y = np.random.randint(2, size=(2, 1))
            dataset = tf.data.Dataset.from_tensor_slices((x, y))
            return dataset.repeat().batch(1, drop_remainder=True)

        dist_dataset = strategy.distribute_datasets_from_function(dataset_fn)
        iterator = iter(dist_dataset)

        @tf.function()
        def train_step(iterator):

            def step_fn(inputs):
                features, labels = inputs
                with tf.GradientTape() as tape:
                    logits = model(features, training=True)
                    loss = tf.keras.losses.sparse_categorical_crossentropy(labels, logits)

                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))

            strategy.run(step_fn, args=(next(iterator),))

        weights = model.trainable_variables[0].numpy()
        train_step(iterator)
        # (end of the first part)
        assert int(optimizer.iterations.numpy()) == 1
        assert not np.allclose(weights, model.trainable_variables[0].numpy())
        # Mirrored: every replica holds the same updated weights.
        copies = [v.numpy() for v in model.trainable_variables[0].value.values]
        assert len(copies) == 8 and all(np.array_equal(copies[0], c) for c in copies)


def test_sixteen_core_mesh_in_a_fresh_process(run_python):
    result = run_python("""
        import tensorflow as tf
        from compat_distribute.testing import fake_tpu

        with fake_tpu(mesh_shape=(2, 2, 2, 2)):
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
            topology = tf.tpu.experimental.initialize_tpu_system(resolver)
            strategy = tf.distribute.TPUStrategy(resolver)

            @tf.function
            def step():
                ctx = tf.distribute.get_replica_context()
                return strategy.run(
                    lambda: tf.distribute.get_replica_context().all_reduce(
                        "SUM", tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)))

            sums = strategy.experimental_local_results(step())
            assignment = tf.tpu.experimental.DeviceAssignment.build(
                topology, computation_shape=[1, 1, 2, 2], num_replicas=4)
            split = tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)
            print(resolver.num_accelerators()["TPU"], strategy.num_replicas_in_sync,
                  sorted({float(s) for s in sums}), len(tf.config.list_logical_devices("CPU")),
                  split.num_replicas_in_sync, split.extended.num_replicas_per_host)
        """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "16 16 [120.0] 16 4 4"
