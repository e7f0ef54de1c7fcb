"""A TF1 graph's multi-step loop builds the step once, as TF1 did, on both shims.

TF1 programs create their variables inside the step (`tf.compat.v1.get_variable`,
`tf.compat.v1.layers`, a V1 optimizer's slots), so building the step twice fails
("Variable w already exists") or trains two copies. Here a step makes its
variables and Adam's slots in a loop of 4 steps a run, with the last-step loss
carried from `initial_loop_values` as TF1 required, and trains as one device does.
"""

import numpy as np
import pytest
import tensorflow as tf

import compat_distribute as cd
from compat_distribute.testing import FakeTPUClusterResolver

X = np.linspace(-1, 1, 64, dtype=np.float32).reshape(-1, 1)
Y = 3 * X + 1
GLOBAL_BATCH = 16
STEPS = 4
RUNS = 3


@pytest.fixture(name="strategy", scope="module", params=["tpu", "mwms"])
def strategy_fixture(request):
    if request.param == "tpu":
        return cd.TPUStrategy(FakeTPUClusterResolver("v3-8"), steps_per_run=STEPS)
    return cd.MultiWorkerMirroredStrategy()


def _dataset():
    return tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(GLOBAL_BATCH, drop_remainder=True)


def _loss(x, y, replicas):
    w = tf.compat.v1.get_variable("w", [1, 1], initializer=tf.compat.v1.zeros_initializer())
    b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.zeros_initializer())
    return tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y)) / replicas


def _one_device():
    with tf.Graph().as_default():
        x, y = tf.compat.v1.data.make_one_shot_iterator(_dataset()).get_next()
        train = tf.compat.v1.train.AdamOptimizer(0.1).minimize(_loss(x, y, 1))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(STEPS * RUNS):
                session.run(train)
            return session.run(tf.compat.v1.trainable_variables())


def test_variables_and_slots_made_in_the_step_exist_once_and_train_as_one_device(strategy):
    n = strategy.num_replicas_in_sync
    with tf.Graph().as_default() as graph, strategy.scope():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        optimizer = tf.compat.v1.train.AdamOptimizer(0.1)
        iterator = strategy.make_dataset_iterator(_dataset())

        def replica_step(x, y):
            loss = _loss(x, y, n)
            with tf.control_dependencies([optimizer.minimize(loss, global_step=global_step)]):
                return tf.identity(loss)

        def step_fn(ctx, inputs):
            loss = strategy.extended.call_for_each_replica(replica_step, args=inputs)
            ctx.set_last_step_output("loss", loss, reduce_op=tf.distribute.ReduceOp.SUM)

        ctx = strategy.extended.experimental_run_steps_on_iterator(
            step_fn, iterator, iterations=STEPS, initial_loop_values={"loss": tf.constant(0.0)}
        )
        names = sorted(v.name for v in tf.compat.v1.global_variables())
        loops = [op.type for op in graph.get_operations() if op.type in ("While", "StatelessWhile")]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(iterator.initializer)
            losses = []
            for _ in range(RUNS):
                steps, loss = session.run([ctx.run_op, ctx.last_step_outputs["loss"]])
                assert steps == STEPS
                losses.append(float(loss))
            trained = session.run(tf.compat.v1.trainable_variables())
            assert session.run(global_step) == STEPS * RUNS
    assert loops == ["While"]
    assert names == [
        "b/Adam:0", "b/Adam_1:0", "b:0", "beta1_power:0", "beta2_power:0",
        "global_step:0", "w/Adam:0", "w/Adam_1:0", "w:0",
    ]
    assert losses[-1] < losses[0]
    for got, want in zip(trained, _one_device()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_tf_1_12s_aggregation_keyword_reduces_as_reduce_op_with_a_warning(strategy):
    n = strategy.num_replicas_in_sync

    def loop(**set_output):
        with tf.Graph().as_default(), strategy.scope():
            iterator = strategy.make_dataset_iterator(tf.data.Dataset.range(1000).batch(n))

            def step_fn(ctx, inputs):
                total = strategy.extended.call_for_each_replica(tf.reduce_sum, args=(inputs,))
                ctx.set_last_step_output("total", total, **set_output)

            ctx = strategy.extended.experimental_run_steps_on_iterator(
                step_fn, iterator, iterations=2, initial_loop_values={"total": tf.constant(0, tf.int64)}
            )
            with tf.compat.v1.Session() as session:
                session.run(iterator.initializer)
                return session.run(ctx.last_step_outputs["total"])

    with pytest.warns(DeprecationWarning) as caught:
        old = loop(aggregation=tf.compat.v1.VariableAggregation.SUM)
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        "set_last_step_output's aggregation is deprecated; use reduce_op (renamed in TensorFlow 1.13)"
    ]
    # The second batch, summed over the replicas: n..2n-1.
    assert old == loop(reduce_op=tf.distribute.ReduceOp.SUM) == sum(range(n, 2 * n))
    with pytest.raises(TypeError) as both:
        loop(reduce_op=tf.distribute.ReduceOp.SUM, aggregation=tf.VariableAggregation.SUM)
    assert str(both.value) == (
        "set_last_step_output(): got both reduce_op=<ReduceOp.SUM: 'SUM'> and "
        "aggregation=<VariableAggregationV2.SUM: 1>, TF 1.12's name of it; pass only reduce_op."
    )
