"""One step of `experimental_run_steps_on_iterator` in a TF1 graph builds no loop, as on a TPU.

TPUExtended runs a single step in the caller's graph, so what the step hands
back with `ctx.set_non_tensor_output` (a TF1 metric's value, typically) can be
fetched with `Session.run`. Restates what TensorFlow's metrics_v1_test checks on
its TPU combinations, on the fake v3-8: each update consumes one batch of 4 per
replica, 8 batches in all.
"""

import pytest
import tensorflow as tf

LOOP_OPS = ("While", "StatelessWhile")


def _numbers(_):
    return tf.data.Dataset.range(1000).map(lambda x: tf.cast(x, tf.float32)).batch(4, drop_remainder=True)


def _labelled(_):
    return tf.data.Dataset.range(1000).map(lambda x: {"labels": x % 5, "predictions": x % 3}).batch(
        4, drop_remainder=True
    )


def _metric_values(strategy, dataset_fn, metric_fn, updates, iterations=lambda: 1):
    """The metric's value after each of `updates` runs of a one-step loop
    (`iterations()` builds its count in the graph)."""
    with tf.Graph().as_default() as graph, strategy.scope():
        iterator = strategy.make_input_fn_iterator(dataset_fn)

        def step(ctx, inputs):
            value, update = strategy.extended.call_for_each_replica(metric_fn, args=(inputs,))
            ctx.set_non_tensor_output(name="value", output=value)
            return strategy.group(update)

        ctx = strategy.extended.experimental_run_steps_on_iterator(step, iterator, iterations=iterations())
        loops = [op.type for op in graph.get_operations() if op.type in LOOP_OPS]
        with tf.compat.v1.Session() as session:
            session.run(iterator.initializer)
            session.run(tf.compat.v1.local_variables_initializer())
            values = []
            for _ in range(updates):
                assert session.run(ctx.run_op) == 1
                values.append(session.run(ctx.non_tensor_outputs["value"]).tolist())
    return loops, values


def test_a_metric_value_set_in_one_step_is_fetched_after_each_update(v3_8):
    loops, values = _metric_values(v3_8, _numbers, tf.compat.v1.metrics.mean, updates=3)
    assert loops == []
    # Mean of 0..31, of 0..63, of 0..95.
    assert values == [15.5, 31.5, 47.5]


def test_an_accuracy_set_in_one_step_counts_every_replica(v3_8):
    def accuracy(x):
        return tf.compat.v1.metrics.accuracy(x["labels"], x["predictions"])

    _, values = _metric_values(v3_8, _labelled, accuracy, updates=2)
    # x % 5 == x % 3 for x % 15 in {0, 1, 2}: 8 of 0..31, 15 of 0..63.
    assert values == [8 / 32, 15 / 64]


def test_iterations_given_as_a_constant_tensor_of_one_builds_no_loop_either(v3_8):
    loops, values = _metric_values(
        v3_8, _numbers, tf.compat.v1.metrics.mean_tensor, updates=1, iterations=lambda: tf.constant(1)
    )
    assert loops == []
    # Column means of rows 0..31 of [4x, 4x+1, 4x+2, 4x+3].
    assert values == [[14.0, 15.0, 16.0, 17.0]]


def test_more_steps_loop_and_their_values_stay_inside_the_loop(v3_8):
    with tf.Graph().as_default() as graph, v3_8.scope():
        iterator = v3_8.make_input_fn_iterator(_numbers)

        def step(ctx, inputs):
            value, update = v3_8.extended.call_for_each_replica(tf.compat.v1.metrics.mean, args=(inputs,))
            ctx.set_non_tensor_output(name="value", output=value)
            return v3_8.group(update)

        ctx = v3_8.extended.experimental_run_steps_on_iterator(step, iterator, iterations=2)
        assert [op.type for op in graph.get_operations() if op.type in LOOP_OPS]
        value = ctx.non_tensor_outputs["value"]
        with tf.compat.v1.Session() as session:
            session.run(iterator.initializer)
            session.run(tf.compat.v1.local_variables_initializer())
            assert session.run(ctx.run_op) == 2
            # As on a TPU under TF2, whose loop is a function too: the last step's
            # values belong to the loop's body.
            with pytest.raises(ValueError, match="is not an element of this graph"):
                session.run(value)
