"""Reductions as on a TPU: in the step every tensor is a cross_replica_sum operand."""

import pytest
import tensorflow as tf

from conformance_support import local
from conformance_support import strategy_on


def test_all_reduce_of_a_tensor_made_in_the_step(tpu_strategy):
    """`all_reduce("SUM", 1.0)` of a tensor each replica makes gives the replica count.

    TF: strategy_common_test.py ReplicaCtxAllReduceTest.testBasic
    """

    @tf.function
    def step():
        return tpu_strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.identity(1.0))
        )

    assert local(tpu_strategy, step()) == [1.0 * tpu_strategy.num_replicas_in_sync] * (
        tpu_strategy.num_replicas_in_sync
    )


def test_all_reduce_of_a_tensor_every_replica_shares(tpu_strategy):
    """`all_reduce` of a function argument or captured tensor, the same in every replica, sums it.

    TF: strategy_common_test.py ReplicaCtxAllReduceTest.testBasic
    """
    n = tpu_strategy.num_replicas_in_sync
    captured = tf.constant(3.0)

    @tf.function
    def step(x):
        def replica(y):
            context = tf.distribute.get_replica_context()
            return (
                context.all_reduce("SUM", y),
                context.all_reduce("MEAN", y),
                context.all_reduce("SUM", captured),
            )

        return tpu_strategy.run(replica, args=(x,))

    sums, means, captured_sums = step(tf.constant(2.0))
    assert local(tpu_strategy, sums) == [2.0 * n] * n
    assert local(tpu_strategy, means) == [2.0] * n
    assert local(tpu_strategy, captured_sums) == [3.0 * n] * n


def test_reduce_values_from_function_in_and_out_of_scope(tpu_strategy):
    """`reduce(SUM)` of a per-replica 1.0 gives the replica count, eagerly and in a tf.function.

    TF: strategy_common_test.py ReduceTest.testBasic
    """
    ones = tpu_strategy.experimental_distribute_values_from_function(
        lambda _: tf.ones((), tf.float32)
    )

    def reduce():
        return tpu_strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None)

    expected = 1.0 * tpu_strategy.num_replicas_in_sync
    with tpu_strategy.scope():
        assert reduce().numpy() == expected
        assert tf.function(reduce)().numpy() == expected
    assert reduce().numpy() == expected
    assert tf.function(reduce)().numpy() == expected


def test_reduce_along_an_axis(tpu_strategy):
    """Reducing per-replica [1, 2] along axis 0: MEAN is 1.5, SUM is 3 x replicas.

    TF: strategy_common_test.py ReduceTest.testAxis
    """
    x = tpu_strategy.run(tf.function(lambda: tf.constant([1.0, 2.0])))
    assert tpu_strategy.reduce(tf.distribute.ReduceOp.MEAN, x, axis=0).numpy() == 1.5
    assert (
        tpu_strategy.reduce(tf.distribute.ReduceOp.SUM, x, axis=0).numpy()
        == 3.0 * tpu_strategy.num_replicas_in_sync
    )


def test_reduce_mean_of_per_replica_squares(tpu_strategy):
    """MEAN of per-replica squares of the replicas' inputs is their average square.

    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_reduce
    """
    n = tpu_strategy.num_replicas_in_sync
    inputs = tpu_strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant(float(context.replica_id_in_sync_group + 2))
    )
    squares = tpu_strategy.run(tf.function(tf.square), args=(inputs,))
    with tpu_strategy.scope():
        mean = tpu_strategy.reduce(tf.distribute.ReduceOp.MEAN, squares, axis=None)
    assert mean.numpy() == pytest.approx(sum((k + 2.0) ** 2 for k in range(n)) / n)


# TF's TwoDeviceDistributionTestBase: two replicas, a tf.function step given to
# the V1 `experimental_run` in eager mode, which a TPU sends to `run`.
ALL_REDUCE_CASES = {
    # reduce op: (expected scalar, expected vector, expected gradient)
    "SUM": (4.0, [42.0, 43.0], 4.0),
    "MEAN": (2.0, [21.0, 21.5], 2.0),
}


def _two_replica_run(tpu_resolver, topology, step, inputs):
    """`experimental_run(tf.function(step), iterator)` eagerly on two replicas, one input each."""
    strategy = strategy_on(tpu_resolver, topology, [0, 1])
    iterator = strategy.make_input_fn_iterator(
        lambda _: tf.data.Dataset.from_tensor_slices(inputs)
    )
    iterator.initialize()
    assert tf.executing_eagerly()
    outputs = strategy.experimental_run(tf.function(step), iterator)
    return strategy, outputs


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
@pytest.mark.parametrize("op", sorted(ALL_REDUCE_CASES))
def test_experimental_run_of_a_tf_function_all_reduces_eagerly(tpu_resolver, topology, op):
    """Eager `experimental_run(tf.function)` on 2 replicas: all_reduce SUM of (1, 3) and ([39, 2], [3, 41]) gives 4 and [42, 43] on each replica; MEAN gives 2 and [21, 21.5].

    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_all_reduce_sum
    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_all_reduce_mean
    """
    scalar, vector, _ = ALL_REDUCE_CASES[op]
    strategy, (sums, vectors) = _two_replica_run(
        tpu_resolver,
        topology,
        lambda value: tf.distribute.get_replica_context().all_reduce(op, value),
        ([1.0, 3.0], [[39.0, 2.0], [3.0, 41.0]]),
    )
    assert local(strategy, sums) == [scalar, scalar]
    assert local(strategy, vectors) == [vector, vector]


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
@pytest.mark.parametrize("op", sorted(ALL_REDUCE_CASES))
def test_gradients_through_an_all_reduce_in_eager_experimental_run(tpu_resolver, topology, op):
    """`tf.gradients` of all_reduce(x) * c, with c = 1 and 3 on 2 replicas, is 4 on each for SUM, 2 for MEAN.

    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_all_reduce_sum_gradients
    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_all_reduce_mean_gradients
    """

    def step(c):
        x = tf.identity(42.0)
        y = tf.distribute.get_replica_context().all_reduce(op, x) * c
        return tf.gradients(y, [x])[0]

    strategy, grads = _two_replica_run(tpu_resolver, topology, step, [1.0, 3.0])
    assert local(strategy, grads) == [ALL_REDUCE_CASES[op][2]] * 2


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
@pytest.mark.parametrize("op", sorted(ALL_REDUCE_CASES))
def test_gradient_tape_through_an_all_reduce_in_eager_experimental_run(
    tpu_resolver, topology, op
):
    """A GradientTape's gradient of all_reduce(x) * c, with c = 1 and 3 on 2 replicas, is 4 on each for SUM, 2 for MEAN.

    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_all_reduce_sum_gradient_tape
    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_all_reduce_mean_gradient_tape
    """

    def step(c):
        x = tf.identity(42.0)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.distribute.get_replica_context().all_reduce(op, x) * c
        return tape.gradient(y, x)

    strategy, grads = _two_replica_run(tpu_resolver, topology, step, [1.0, 3.0])
    assert local(strategy, grads) == [ALL_REDUCE_CASES[op][2]] * 2
