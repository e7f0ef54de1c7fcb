"""The fake TPU strategy: replicas, run's TPU rules, variables, logical devices, input."""


import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import tpu_strategy as tf_tpu_strategy

import compat_distribute
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import FakeTPUStrategy
from compat_distribute.testing import initialize_tpu_system

from fake_tpu_helpers import CPU, EAGER_RUN_ERROR, SPMD_ASSIGN_ERROR, values


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

    # A replica reads it from its core 1, as a TPU reads a replica's first core
    # holding a copy; packed (TPUStrategyV2's default) and not.
    @tf.function
    def step():
        return model_parallel.run(lambda: v * 3.0)

    assert values(step(), model_parallel) == [6.0] * 4
    model_parallel._enable_packed_variable_in_eager_mode = False  # pylint: disable=protected-access
    try:
        with model_parallel.scope(), model_parallel.extended.experimental_logical_device(1):
            unpacked = tf.Variable(2.0)
    finally:
        model_parallel._enable_packed_variable_in_eager_mode = True  # pylint: disable=protected-access
    step_unpacked = tf.function(lambda: model_parallel.run(lambda: unpacked * 3.0))
    assert values(step_unpacked(), model_parallel) == [6.0] * 4
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
    # The annotations are TF's XlaSharding ops: in the one trace of the step, as
    # on a TPU, or in each of the 4 replicas' traces (the per-replica mode).
    graph = step.get_concrete_function(x).graph
    sharding_ops = [op for op in graph.get_operations() if op.type == "XlaSharding"]
    sharding_ops += [
        op
        for f in graph.as_graph_def().library.function
        for op in f.node_def
        if op.op == "XlaSharding"
    ]
    assert len(sharding_ops) == 3 * (1 if model_parallel.extended.trace_mode == "once" else 4)


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
    assert str(info.value) == message  # TF's text, first: not after "in user code:"


def test_assign_to_logical_device_validates_as_a_tpu(model_parallel, spmd):
    @tf.function
    def step(strategy, core):
        return strategy.experimental_assign_to_logical_device(tf.ones([2]), core)

    with pytest.raises(ValueError) as info:
        step(model_parallel, 2)
    assert str(info.value) == (
        "`logical_core_id` to assign must be lower then total number of logical devices per "
        "replica. Received logical device id 2 but there are only total of 2 logical devices "
        "in replica."
    )
    with pytest.raises(ValueError) as info:
        step(spmd, 0)
    assert str(info.value) == SPMD_ASSIGN_ERROR


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




def test_variables_are_packed_by_default_as_on_tpu_strategy_v2(v3_8):
    assert v3_8._enable_packed_variable_in_eager_mode is True  # pylint: disable=protected-access
    with v3_8.scope():
        v = tf.Variable(1.0)
    assert v._packed_var is not None  # pylint: disable=protected-access


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_a_step_reads_a_variable_after_its_update(v3_8, packed):
    # The update (a merge call) and the reads after it go through one handle, so
    # every replica sees the new value, step after step, as on a TPU.
    v3_8._enable_packed_variable_in_eager_mode = packed  # pylint: disable=protected-access
    try:
        with v3_8.scope():
            v = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)
    finally:
        v3_8._enable_packed_variable_in_eager_mode = True  # pylint: disable=protected-access

    @tf.function
    def step():
        def replica():
            v.assign_add(1.0)
            return v * 1.0

        return v3_8.run(replica)

    assert [values(step(), v3_8) for _ in range(5)] == [[float(k)] * 8 for k in range(1, 6)]
    assert values(v, v3_8) == [5.0] * 8


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_reduce_of_a_variable_sums_its_copies_as_a_tpu(v3_8, packed):
    v3_8._enable_packed_variable_in_eager_mode = packed  # pylint: disable=protected-access
    try:
        with v3_8.scope():
            v = tf.Variable(2.0)
    finally:
        v3_8._enable_packed_variable_in_eager_mode = True  # pylint: disable=protected-access
    assert v3_8.reduce("SUM", v, axis=None).numpy() == 16.0
    assert v3_8.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None).numpy() == 2.0
    assert (v + 1.0).numpy() == 3.0
    v.assign_add(1.0)
    assert values(v, v3_8) == [3.0] * 8


def test_reading_a_variable_from_a_core_it_has_no_copy_on_is_tfs_value_error():
    resolver = FakeTPUClusterResolver("v3-8")
    topology = initialize_tpu_system(resolver)

    def on_core(core):
        assignment = tf.tpu.experimental.DeviceAssignment(
            topology, core_assignment=[[topology.device_coordinates[0][core].tolist()]]
        )
        return FakeTPUStrategy(resolver, experimental_device_assignment=assignment)

    first, second = on_core(0), on_core(1)
    with first.scope():
        v = tf.Variable(1.0)
    with pytest.raises(
        ValueError,
        match="Failed to find a variable on any device in replica 0 for current device assignment",
    ):
        second.run(tf.function(v.read_value))
