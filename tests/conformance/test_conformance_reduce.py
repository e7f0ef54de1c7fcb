"""Reductions as on a TPU: in the step every tensor is a cross_replica_sum operand."""

import pytest
import tensorflow as tf

from conformance_support import local


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
