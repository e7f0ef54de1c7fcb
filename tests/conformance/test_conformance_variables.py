"""Variables as on a TPU, packed (TPUStrategyV2's default) and not: reads, updates, devices."""

import pytest
import tensorflow as tf

from conformance_support import core_coordinates
from conformance_support import device_names_differ
from conformance_support import local
from conformance_support import strategy_on


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
@device_names_differ
def test_variables_are_read_by_device_across_device_assignments(tpu_resolver, topology, packed):
    """Cores (1, 0) are the worker devices of cores (0, 1) reversed; a variable with copy 1 at 42 reads [1, 42], then [42, 1] there.

    TF: tpu_strategy_test.py DeviceAssignmentTest.test_variables_mismatched_device_assignment
    """
    forward = strategy_on(tpu_resolver, topology, [0, 1], packed)
    backward = strategy_on(tpu_resolver, topology, [1, 0], packed)
    with forward.scope():
        v = tf.Variable(1.0)
    forward.experimental_local_results(v)[1].assign(42.0)
    assert local(forward, v) == [1.0, 42.0]
    assert backward.extended.worker_devices == tuple(reversed(forward.extended.worker_devices))
    assert local(backward, backward.run(tf.function(v.read_value))) == [42.0, 1.0]


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
def test_one_variable_serves_strategies_on_subsets_of_its_cores(tpu_resolver, topology, packed):
    """A MEAN variable (0) of the all-core strategy, read by `v + 1` on core 0 and on core 1, sums to 2.

    TF: tpu_strategy_test.py TPUStrategyTest.test_computation_on_subset_cores
    """
    everywhere = tf.distribute.TPUStrategy(tpu_resolver)
    everywhere._enable_packed_variable_in_eager_mode = packed  # pylint: disable=protected-access
    with everywhere.scope():
        v = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)
    first = strategy_on(tpu_resolver, topology, [0], packed)
    second = strategy_on(tpu_resolver, topology, [1], packed)

    @tf.function
    def train():
        def step():
            return v + 1.0

        everywhere.run(step)
        return first.run(step) + second.run(step)

    train()
    assert train().numpy() == 2.0


@device_names_differ
def test_arithmetic_reads_the_variable(tpu_strategy, packed):
    """In a tf.function `v + 1.0` is 2.0 and the handle is on replica 0's core; eager arithmetic reads v too.

    TF: tpu_strategy_test.py TPUStrategyTest.test_handle_in_cross_replica_context
    """
    with tpu_strategy.scope():
        v = tf.Variable(1.0)
    assert (v + 1.0).numpy() == 2.0 and (v * 2.0).numpy() == 2.0 and (1.0 - v).numpy() == 0.0

    @tf.function
    def plus_one():
        assert v.handle.device.endswith(tpu_strategy.extended.worker_devices[0].split("/")[-1])
        return v + 1.0

    assert plus_one().numpy() == 2.0
    del packed


def test_assign_add_in_a_device_loop_updates_every_copy(tpu_strategy, packed):
    """`assign_add(1)` in each of two steps of a tf.range loop leaves a MEAN variable at 2.

    TF: tpu_strategy_test.py TPUStrategyTest.test_control_output_in_while_body_fn
    """
    with tpu_strategy.scope():
        v = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)

    @tf.function
    def train():
        for _ in tf.range(2):
            tpu_strategy.run(lambda: v.assign_add(1.0))

    train()
    assert v.numpy() == 2.0
    assert local(tpu_strategy, v) == [2.0] * tpu_strategy.num_replicas_in_sync
    v.assign_add(1.0)  # Cross-replica, eager.
    assert local(tpu_strategy, v) == [3.0] * tpu_strategy.num_replicas_in_sync
    del packed


def test_a_constraint_applies_after_an_update(tpu_strategy, packed):
    """A variable's constraint, applied after `assign_add` in a tf.function, sets its value.

    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_constraint
    """
    with tpu_strategy.scope():
        v = tf.Variable(2.0, constraint=lambda x: 0.0 * x + 1.0)
    assert v.value().numpy() == 2.0

    @tf.function
    def update():
        v.assign_add(1.0)
        v.assign(v.constraint(v))

    update()
    assert v.value().numpy() == 1.0
    del packed


def test_a_plain_variable_is_read_inside_a_step(tpu_strategy):
    """A variable made outside the scope is read inside every replica of a step.

    TF: tpu_strategy_test.py TPUStrategyTest.test_using_external_variable_inside_tf_function
    """
    n = tpu_strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.range(n * 2, output_type=tf.float32).batch(n)
    iterator = iter(tpu_strategy.experimental_distribute_dataset(dataset))
    v = tf.Variable(2.0)

    @tf.function
    def step(batch):
        return tpu_strategy.run(lambda x: x + v, args=(batch,))

    # Each replica's batch (on a pod, each host's pipeline takes every num_hosts-th batch).
    batch = next(iterator)
    assert local(tpu_strategy, step(batch)) == [[x + 2.0] for [x] in local(tpu_strategy, batch)]


def test_sync_on_read_variable_all_reduces_its_copies(tpu_strategy, packed):
    """A sync-on-read variable given each replica's input all-reduces to their sum (x + sum per replica), then reads 0.

    TF: tpu_strategy_test.py TPUStrategyTest.test_all_reduce_on_sync_on_read_variable
    """
    n = tpu_strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.range(n, output_type=tf.float32).batch(n, drop_remainder=True)
    iterator = iter(tpu_strategy.experimental_distribute_dataset(dataset))
    with tpu_strategy.scope():
        w = tf.Variable(
            (0.0,),
            shape=(1,),
            trainable=False,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )

    @tf.function
    def train(batch):
        def write(x):
            w.assign(x + w)
            return w

        def all_reduce(x):
            return tf.distribute.get_replica_context().all_reduce("SUM", w) + x

        written = tpu_strategy.run(write, args=(batch,))
        return tpu_strategy.run(all_reduce, args=(written,))

    total = sum(range(n))
    batch = next(iterator)  # replica k's batch is [k] on one host, not on a pod
    assert local(tpu_strategy, train(batch)) == [
        [x + total] for [x] in local(tpu_strategy, batch)
    ]
    assert w.read_value().numpy().tolist() == [0.0]
    del packed


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
def test_checkpoint_restores_variables_of_each_logical_device(
    tpu_resolver, topology, packed, tmp_path
):
    """Variables on logical devices 0 and 1 (2 and 3), changed after a save, read 2 and 3 after a restore.

    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_model_parallelism_checkpointing
    """
    assignment = tf.tpu.experimental.DeviceAssignment(
        topology, core_assignment=[[core_coordinates(topology, 0), core_coordinates(topology, 1)]]
    )
    strategy = tf.distribute.TPUStrategy(tpu_resolver, experimental_device_assignment=assignment)
    strategy._enable_packed_variable_in_eager_mode = packed  # pylint: disable=protected-access
    with strategy.scope():
        with strategy.extended.experimental_logical_device(0):
            v = tf.Variable(2.0)
        with strategy.extended.experimental_logical_device(1):
            w = tf.Variable(3.0)
    checkpoint = tf.train.Checkpoint(v=v, w=w)
    path = checkpoint.write(str(tmp_path / "ckpt"))
    v.assign(20.0)
    w.assign(30.0)
    checkpoint.read(path).assert_consumed()
    assert (local(strategy, v), local(strategy, w)) == ([2.0], [3.0])


def test_a_function_traces_once_per_device(tpu_strategy, packed):
    """A tf.function reading a variable traces once for each replica device it is called on.

    TF: tpu_strategy_test.py TPUStrategyTest.test_per_device_tracing_of_mirrored_variables
    """
    traces = []
    with tpu_strategy.scope():
        v = tf.Variable(0.0)

    @tf.function
    def add_one():
        traces.append(1)
        return tf.add(v, 1.0)

    @tf.function
    def each_device():
        for device in set(tpu_strategy.extended.worker_devices):
            with tf.device(device):
                add_one()

    with tpu_strategy.scope():
        each_device.get_concrete_function()
    assert len(traces) == len(tpu_strategy.extended.worker_devices)
    del packed


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
@device_names_differ
def test_logical_devices_hold_their_variables_and_compute(tpu_resolver, topology):
    """With two cores a replica, v (one copy) is on core 0, w made on logical device 1 on core 1; v*5*w is 30.

    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_model_parallelism
    """
    assignment = tf.tpu.experimental.DeviceAssignment(
        topology, core_assignment=[[core_coordinates(topology, 0), core_coordinates(topology, 1)]]
    )
    strategy = tf.distribute.TPUStrategy(tpu_resolver, experimental_device_assignment=assignment)
    with strategy.scope():
        v = tf.Variable(2.0)
        with strategy.extended.experimental_logical_device(1):
            w = tf.Variable(3.0)
    assert [len(strategy.experimental_local_results(x)) for x in (v, w)] == [1, 1]
    assert strategy.experimental_local_results(v)[0].device.endswith(":0")
    assert strategy.experimental_local_results(w)[0].device.endswith(":1")

    @tf.function
    def model(x):
        context = tf.distribute.get_replica_context()
        with context.experimental_logical_device(0):
            y = v * x
        with context.experimental_logical_device(1):
            return w * y

    assert local(strategy, strategy.run(model, args=(5.0,))) == [30.0]
