"""Custom training loops, distributed values and TF1 metrics as on a TPU.

Restates what TensorFlow's custom_training_loop_input_test, values_test,
input_lib_test, tpu_strategy_model_parallelism_test and metrics_v1_test check
on their TPU combinations, for a slice of any size (TF's tests assume two cores).
"""

import numpy as np
import pytest
import tensorflow as tf

from compat_distribute.smoke.targets import two_cores_per_replica
from conformance_support import fed_element
from conformance_support import local
from conformance_support import tf1_tpu_session


def _numbers(count):
    return tf.data.Dataset.range(count).map(lambda x: tf.cast(x, tf.float32))


def test_steps_iterating_inside_a_function_square_each_batch_in_order(tpu_strategy):
    """Two steps in one tf.function, each on the next global batch, square the element each replica takes (one host: r, then n + r).

    TF: custom_training_loop_input_test.py InputIterationTest.testIterationInsideFunction
    """
    n = tpu_strategy.num_replicas_in_sync
    dataset = tpu_strategy.experimental_distribute_dataset(_numbers(2 * n).batch(n))

    @tf.function
    def two_steps(dataset):
        iterator = iter(dataset)
        return [tpu_strategy.run(tf.square, args=(next(iterator),)) for _ in range(2)]

    first, second = (local(tpu_strategy, out) for out in two_steps(dataset))
    assert first == [[float(fed_element(tpu_strategy, 0, r) ** 2)] for r in range(n)]
    assert second == [[float(fed_element(tpu_strategy, 1, r) ** 2)] for r in range(n)]


def test_steps_past_the_end_raise_out_of_range_and_keep_what_they_added(tpu_strategy):
    """Steps past the last batch raise OutOfRangeError; a SUM variable holds what the two batches added.

    TF: custom_training_loop_input_test.py InputIterationTest.testDatasetOutOfRange
    """
    n = tpu_strategy.num_replicas_in_sync
    with tpu_strategy.scope():
        total = tf.Variable(0.0, aggregation=tf.VariableAggregation.SUM)

    @tf.function
    def step(iterator):
        tpu_strategy.run(lambda x: total.assign_add(tf.reduce_sum(x)), args=(next(iterator),))

    iterator = iter(tpu_strategy.experimental_distribute_dataset(_numbers(2 * n).batch(n)))
    step(iterator)
    step(iterator)
    with pytest.raises(tf.errors.OutOfRangeError):
        step(iterator)
    assert total.numpy() == sum(range(2 * n))


def test_a_partial_batch_leaves_the_other_replicas_empty_batches(tpu_strategy):
    """A one-element batch gives replica 0 its square and the others empty results, beside a fixed-size output on every replica.

    TF: custom_training_loop_input_test.py InputIterationTest.testDatasetPartialBatchWithMixedOutputs
    """
    n = tpu_strategy.num_replicas_in_sync
    iterator = iter(tpu_strategy.experimental_distribute_dataset(_numbers(1).map(lambda x: x + 5).batch(n)))

    @tf.function
    def step(iterator):
        return tpu_strategy.run(lambda x: (tf.zeros([3]), tf.square(x)), args=(next(iterator),))

    fixed, squares = step(iterator)
    assert local(tpu_strategy, fixed) == [[0.0, 0.0, 0.0]] * n
    assert local(tpu_strategy, squares) == [[25.0]] + [[]] * (n - 1)


def test_a_plain_function_run_eagerly_is_refused(tpu_strategy):
    """`run` of a plain Python function outside a tf.function raises NotImplementedError "does not support pure eager execution".

    TF: custom_training_loop_input_test.py InputIterationTest.testFullEagerTPU
    """
    n = tpu_strategy.num_replicas_in_sync
    batch = next(iter(tpu_strategy.experimental_distribute_dataset(_numbers(n).batch(n))))
    with pytest.raises(NotImplementedError, match="does not support pure eager execution"):
        tpu_strategy.run(tf.square, args=(batch,))


def test_a_dataset_iterated_to_its_end_starts_again_from_a_new_iterator(tpu_strategy):
    """Iterating range(2n) in batches of n gives each replica its elements (one host: r, then n + r), then stops; a new iterator starts again.

    TF: input_lib_test.py DistributedIteratorSingleWorkerTest.testTPU
    """
    n = tpu_strategy.num_replicas_in_sync
    dataset = tpu_strategy.experimental_distribute_dataset(tf.data.Dataset.range(2 * n).batch(n))
    expected = [[[fed_element(tpu_strategy, step, r)] for r in range(n)] for step in range(2)]
    for _ in range(2):
        assert [local(tpu_strategy, batch) for batch in dataset] == expected


def test_values_from_a_function_sit_on_their_replicas_and_run_squares_each(tpu_strategy):
    """A value per replica made by a function is on that replica's device; `run` squares replica r's r into r**2.

    TF: values_test.py DistributedValuesTest.testMakeDistributedValueExplicitDevicePlacement
    TF: values_test.py DistributedValuesTest.testMakeDistributedValueAndRun
    """
    devices = tpu_strategy.extended.worker_devices

    def on_its_device(context):
        with tf.device(devices[context.replica_id_in_sync_group]):
            return tf.identity(float(context.replica_id_in_sync_group))

    values = tpu_strategy.experimental_distribute_values_from_function(on_its_device)
    assert [v.device for v in tpu_strategy.experimental_local_results(values)] == list(devices)
    squares = tf.function(lambda: tpu_strategy.run(tf.square, args=(values,)))()
    assert local(tpu_strategy, squares) == [float(r * r) for r in range(len(devices))]


def test_only_first_replica_assignments_keep_replica_0s_value(tpu_strategy):
    """Each replica assigning its id to an ONLY_FIRST_REPLICA variable leaves 0, replica 0's, on every replica.

    TF: values_test.py MirroredVariableTest.testAggregationOnlyFirstReplica
    """
    with tpu_strategy.scope():
        v = tf.Variable(15.0, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def assign():
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        return v.assign(tf.cast(replica, tf.float32))

    results = tf.function(lambda: tpu_strategy.run(assign))()
    assert local(tpu_strategy, results) == [0.0] * tpu_strategy.num_replicas_in_sync
    assert local(tpu_strategy, v) == [0.0] * tpu_strategy.num_replicas_in_sync


def test_a_sum_sync_on_read_variable_reads_the_sum_of_the_replicas(tpu_strategy):
    """A SUM sync-on-read variable each replica sets to its id reads 0 + 1 + ... + (n - 1) across replicas.

    TF: values_test.py SyncOnReadVariableTest.testReadValueInCrossReplicaContext
    """
    n = tpu_strategy.num_replicas_in_sync
    with tpu_strategy.scope():
        v = tf.Variable(
            0.0, synchronization=tf.VariableSynchronization.ON_READ, aggregation=tf.VariableAggregation.SUM
        )

    def assign():
        return v.assign(tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32))

    tf.function(lambda: tpu_strategy.run(assign))()
    expected = n * (n - 1) / 2
    assert [v.read_value().numpy(), v.value().numpy(), tf.identity(v).numpy()] == [expected] * 3


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
def test_outside_compilation_in_an_spmd_step_runs_on_the_host(tpu_resolver, topology):
    """In an SPMD step of two cores a replica, `outside_compilation` adds 1 on the host: (0 + 1) + 1 + 1 = 3 a replica.

    TF: tpu_strategy_model_parallelism_test.py TPUStrategyModelParallelismTest.test_spmd_with_outside_comp
    """
    # Two cores of a chip (v2, v3), or two chips where a chip has one core (v4).
    assignment = two_cores_per_replica(topology)
    replicas = assignment.num_replicas
    strategy = tf.distribute.TPUStrategy(
        tpu_resolver, experimental_device_assignment=assignment, experimental_spmd_xla_partitioning=True
    )

    @tf.function
    def step(x):
        return tf.compat.v1.tpu.outside_compilation(lambda y: y + 1, x + 1) + 1

    result = strategy.run(step, args=(tf.constant(0, tf.int64),))
    assert strategy.reduce("SUM", result, axis=None).numpy() == 3 * replicas


def test_a_graph_step_metric_value_is_fetched_after_each_update(tpu_strategy, tpu_resolver):
    """In a TF1 graph, one step's `metrics.mean` value, set as a non-tensor output, is fetched after each update: the mean so far.

    TF: metrics_v1_test.py MetricsV1Test.testMean
    """
    n = tpu_strategy.num_replicas_in_sync
    with tf.Graph().as_default(), tpu_strategy.scope():
        # Each host's pipeline takes its share, as a pod's input_fn does (one host: all).
        iterator = tpu_strategy.make_input_fn_iterator(
            lambda context: _numbers(1000)
            .shard(context.num_input_pipelines, context.input_pipeline_id)
            .batch(4, drop_remainder=True)
        )

        def step(ctx, inputs):
            value, update = tpu_strategy.extended.call_for_each_replica(tf.compat.v1.metrics.mean, args=(inputs,))
            ctx.set_non_tensor_output(name="value", output=value)
            return tpu_strategy.group(update)

        ctx = tpu_strategy.extended.experimental_run_steps_on_iterator(step, iterator, iterations=1)
        with tf1_tpu_session(tpu_resolver) as session:
            session.run(iterator.initializer)
            session.run(tf.compat.v1.local_variables_initializer())
            means = []
            for _ in range(2):
                session.run(ctx.run_op)
                means.append(session.run(ctx.non_tensor_outputs["value"]))
    # Each update takes one batch of 4 per replica: the mean of 0 .. 4n - 1, then of 0 .. 8n - 1
    # (on a pod, host h's replicas take the elements h, h + num_hosts, ...).
    np.testing.assert_allclose(means, [(4 * n - 1) / 2, (8 * n - 1) / 2])
