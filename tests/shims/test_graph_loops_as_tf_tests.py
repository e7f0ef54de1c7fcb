"""TensorFlow's own graph-mode tests of `experimental_run_steps_on_iterator`, on the shims.

Restated from TF's minimize_loss_test (train a network, an optimizer made in
the step, batch norm's moving statistics, SUM against MEAN losses, outputs set
with the step's context) with exact values, on the fake TPU and on
MultiWorkerMirroredStrategy, and checked against TF's MirroredStrategy on as
many of the session's virtual CPUs as the shim has replicas.
"""

import numpy as np
import pytest
import tensorflow as tf
# tf.compat.v1.layers, which Keras 3 leaves out; tf-keras keeps them.
from tf_keras.api._v1.keras.__internal__.legacy import layers as tf1_layers

import compat_distribute as cd
from compat_distribute.testing import FakeTPUClusterResolver

LR = 0.01
SUM, MEAN = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN


@pytest.fixture(name="pair", scope="module", params=["tpu", "mwms"])
def pair_fixture(request):
    """(shim, TF's MirroredStrategy with as many replicas)."""
    if request.param == "tpu":
        shim = cd.TPUStrategy(FakeTPUClusterResolver("v3-8"), steps_per_run=2)
    else:
        shim = cd.MultiWorkerMirroredStrategy()
    n = shim.num_replicas_in_sync
    reference = tf.compat.v1.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)])
    return shim, reference


def _both(pair, program):
    """`program(strategy)` on the shim and on the reference."""
    return [program(strategy) for strategy in pair]


def _session_runs(strategy, build, runs, fetch):
    """Builds `build(strategy) -> (iterator, step, extra)` in a fresh graph, then
    runs `step` `runs` times, fetching `fetch(extra)` after each run."""
    with tf.Graph().as_default(), strategy.scope():
        iterator, step, extra = build(strategy)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(iterator.initializer)
            results = []
            for _ in range(runs):
                ran = session.run(step)
                results.append((ran, session.run(fetch(extra))))
            return results


def _input_iterator(strategy, dataset_fn):
    return strategy.make_input_fn_iterator(lambda _: dataset_fn())


def _ones():
    return tf.data.Dataset.from_tensors([[1.0]]).repeat().batch(1, drop_remainder=True)


def _residual(steps, n):
    """y = w + b - 1 after `steps` steps from w = b = 0 on the batch x = 1: each
    replica's gradient of y**2 is 2y for w and for b; a V1 optimizer sums them."""
    return -((1 - 4 * LR * n) ** steps)


def _dense():
    return tf1_layers.Dense(
        1, kernel_initializer=tf.compat.v1.zeros_initializer(), bias_initializer=tf.compat.v1.zeros_initializer()
    )


def test_train_network_two_steps_a_run(pair):
    n = pair[0].num_replicas_in_sync
    runs, iterations = 4, 2

    def build(strategy):
        layer = _dense()
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(LR)

        def model_fn(x):
            def loss():
                y = tf.reshape(layer(x), []) - 1.0
                return y * y

            return optimizer.minimize(loss)  # a tensor loss: the last test

        def step_fn(ctx, inputs):
            del ctx
            return strategy.group(strategy.extended.call_for_each_replica(model_fn, args=(inputs,)))

        iterator = _input_iterator(strategy, _ones)
        ctx = strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations=iterations)
        return iterator, ctx.run_op, layer

    shim, reference = _both(pair, lambda s: _session_runs(s, build, runs, lambda l: [l.kernel, l.bias]))
    for run, ((steps, (kernel, bias)), (_, (ref_kernel, ref_bias))) in enumerate(zip(shim, reference)):
        want = (1 + _residual(iterations * (run + 1), n)) / 2
        np.testing.assert_allclose([kernel.item(), bias.item()], [want, want], rtol=1e-5)
        np.testing.assert_allclose([kernel.item(), bias.item()], [ref_kernel.item(), ref_bias.item()], rtol=1e-6)
        assert steps == iterations


def test_optimizer_made_in_the_step_makes_each_variable_once(pair):
    # TF's test runs one step, which builds no loop; two build fn in a loop.
    n, iterations = pair[0].num_replicas_in_sync, 2

    def names_made(strategy):
        made = []

        def recording_creator(next_creator, **kwargs):
            variable = next_creator(**kwargs)
            made.append((variable.name, bool(kwargs.get("trainable"))))
            return variable

        with tf.Graph().as_default(), tf.variable_creator_scope(recording_creator), strategy.scope():
            layer = _dense()
            optimizer = tf.compat.v1.train.AdagradOptimizer(LR)

            def model_fn(x):
                return optimizer.minimize(lambda: tf.reshape(layer(x), []) ** 2)

            def step_fn(ctx, inputs):
                del ctx
                return strategy.group(strategy.extended.call_for_each_replica(model_fn, args=(inputs,)))

            iterator = _input_iterator(strategy, _ones)
            ctx = strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations=iterations)
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(iterator.initializer)
                steps = session.run(ctx.run_op)  # TF's MirroredStrategy: a group op, None
                accumulator = session.run(optimizer.get_slot(layer.kernel, "accumulator"))
        return sorted(made), accumulator, steps

    (shim_names, shim_accumulator, steps), (ref_names, ref_accumulator, _) = _both(pair, names_made)
    assert steps == iterations
    first = ["dense/bias", "dense/bias/Adagrad", "dense/kernel", "dense/kernel/Adagrad"]
    copies = [f"{name}/replica_{r}" for name in first for r in range(1, n)]
    trainable = {"dense/bias", "dense/kernel"}
    want = sorted((f"{name}:0", name.split("/replica_")[0] in trainable) for name in first + copies)
    assert shim_names == ref_names == want
    # The kernel's gradient is 2 * w * x = 0 from w = 0: Adagrad's accumulator keeps its 0.1.
    np.testing.assert_allclose(shim_accumulator, ref_accumulator)
    np.testing.assert_allclose(shim_accumulator, [[0.1]])


def test_batch_norm_moving_mean_is_the_mean_over_replicas(pair):
    shim_strategy = pair[0]
    n = shim_strategy.num_replicas_in_sync
    momentum, runs, iterations = 0.9, 3, 2
    # Replica r's batch is 16 rows of 8: row i, column j holds 8 * i + j + 100 * r.
    batches = np.array(
        [[[8.0 * i + j + 100.0 * r for j in range(8)] for i in range(16)] for r in range(n)], np.float32
    )

    def build(strategy):
        # As TF's test: a TPU runs the moving-average updates in the replica,
        # the others in cross-replica context (both on a TPU shim).
        in_replica = strategy is shim_strategy and isinstance(strategy, cd.TPUStrategy)
        batch_norm = tf1_layers.BatchNormalization(momentum=momentum, fused=False)
        layer = tf1_layers.Dense(1, use_bias=False)
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(LR)

        def model_fn(x):
            def loss():
                y = batch_norm(x, training=True)
                updates = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS) if in_replica else []
                with tf.control_dependencies(updates):
                    return tf.reduce_mean(tf.reduce_sum(layer(y)) - 1.0)

            return optimizer.minimize(loss)

        def step_fn(ctx, inputs):
            del ctx
            ops = strategy.experimental_local_results(
                strategy.extended.call_for_each_replica(model_fn, args=(inputs,))
            )
            if not in_replica:
                ops += tuple(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS))
            return tf.group(ops)

        iterator = _input_iterator(strategy, lambda: tf.data.Dataset.from_tensor_slices(batches).repeat())
        ctx = strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations=iterations)
        return iterator, ctx.run_op, batch_norm

    shim, reference = _both(pair, lambda s: _session_runs(s, build, runs, lambda b: [b.moving_mean, b.moving_variance]))
    # Each replica's batch moments of column j: mean 60 + j + 100 r, variance
    # that of 8 i over i < 16, 64 * (16**2 - 1) / 12 = 1360; the moving
    # statistics move towards their mean over the replicas.
    mean, variance = 60.0 + np.arange(8) + 50.0 * (n - 1), 1360.0
    want_mean, want_variance = np.zeros(8), np.ones(8)
    for (_, (moving_mean, moving_variance)), (_, (ref_mean, ref_variance)) in zip(shim, reference):
        for _ in range(iterations):
            want_mean = want_mean + (mean - want_mean) * (1 - momentum)
            want_variance = want_variance + (variance - want_variance) * (1 - momentum)
        np.testing.assert_allclose(moving_mean, want_mean, rtol=1e-5)
        np.testing.assert_allclose(moving_variance, want_variance, rtol=1e-5)
        np.testing.assert_allclose(moving_mean, ref_mean, rtol=1e-6)
        np.testing.assert_allclose(moving_variance, ref_variance, rtol=1e-5)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_sum_against_mean_loss(pair, reduction):
    # TF's test runs one step; two make `w` with get_variable inside the loop.
    n, iterations = pair[0].num_replicas_in_sync, 2

    def build(strategy):
        made = []

        def model_fn(inputs):
            x, y = inputs
            w = tf.compat.v1.get_variable("w", initializer=[[2.0]])
            made.append(w)
            if reduction == "sum":
                loss = tf.compat.v1.losses.mean_squared_error(y, x @ w, reduction=tf.compat.v1.losses.Reduction.SUM)
            else:
                loss = tf.compat.v1.losses.mean_squared_error(y, x @ w) / n
            return tf.compat.v1.train.GradientDescentOptimizer(0.001).minimize(loss)

        def step_fn(ctx, inputs):
            del ctx
            return strategy.group(strategy.extended.call_for_each_replica(model_fn, args=(inputs,)))

        def dataset_fn():
            return tf.data.Dataset.from_tensors(([[2.0], [7.0]], [[6.0], [21.0]])).repeat()

        iterator = _input_iterator(strategy, dataset_fn)
        ctx = strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations=iterations)
        assert all(w is made[0] for w in made)
        return iterator, ctx.run_op, made[0]

    (shim,), (reference,) = _both(pair, lambda s: _session_runs(s, build, 1, lambda w: w))
    # Each replica sees the whole batch x = [2, 7], y = [6, 21]: the gradient of
    # the sum of squares is 106 w - 318 (-106 from w = 2, TF's figure); the mean
    # halves it and divides it by n; a V1 optimizer sums the replicas' gradients.
    scale = n if reduction == "sum" else 0.5
    want = 2.0
    for _ in range(iterations):
        want -= 0.001 * scale * (106 * want - 318)
    assert shim[0] == iterations
    np.testing.assert_allclose(shim[1], [[want]], rtol=1e-5)
    np.testing.assert_allclose(shim[1], reference[1], rtol=1e-6)


def test_last_step_outputs_reduced_in_replica_and_cross_replica_and_per_replica(pair):
    n = pair[0].num_replicas_in_sync
    runs, iterations = 3, 2

    def build(strategy):
        kernel = tf.compat.v1.get_variable("kernel", [1, 1], initializer=tf.compat.v1.zeros_initializer())
        bias = tf.compat.v1.get_variable("bias", [1], initializer=tf.compat.v1.zeros_initializer())
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(LR)

        def model_fn(ctx, x):
            y = tf.reshape(tf.nn.bias_add(x @ kernel, bias), []) - 1.0
            loss = y * y
            train = optimizer.minimize(loss)
            ctx.set_last_step_output("replica_loss_reduced", loss, reduce_op=MEAN)
            ctx.set_non_tensor_output("foo", "bar")
            return train, loss

        def step_fn(ctx, inputs):
            train, loss = strategy.extended.call_for_each_replica(model_fn, args=(ctx, inputs))
            ctx.set_last_step_output("cross_replica_loss_reduced", loss, reduce_op=SUM)
            ctx.set_last_step_output("cross_replica_loss_not_reduced", loss)
            return strategy.group(train)

        iterator = _input_iterator(strategy, _ones)
        # TF's portable idiom: a reduced output starts from one value, the
        # other from the local results of a replica call.
        initial = lambda: tf.constant(1e7)  # noqa: E731
        not_reduced = strategy.experimental_local_results(strategy.extended.call_for_each_replica(initial))
        ctx = strategy.extended.experimental_run_steps_on_iterator(
            step_fn,
            iterator,
            iterations=iterations,
            initial_loop_values={
                "cross_replica_loss_not_reduced": not_reduced,
                "cross_replica_loss_reduced": initial(),
                "replica_loss_reduced": initial(),
            },
        )
        assert ctx.non_tensor_outputs == {"foo": ("bar",)}
        outputs = ctx.last_step_outputs
        per_replica = strategy.experimental_local_results(outputs["cross_replica_loss_not_reduced"])
        assert len(per_replica) == n
        for name in ("replica_loss_reduced", "cross_replica_loss_reduced"):
            assert isinstance(outputs[name], tf.Tensor) and outputs[name].shape == []
        fetches = [outputs["replica_loss_reduced"], outputs["cross_replica_loss_reduced"], list(per_replica)]
        return iterator, [ctx.run_op, fetches], kernel

    shim, reference = _both(pair, lambda s: _session_runs(s, build, runs, lambda k: k))
    for run, ((got, kernel), (ref, ref_kernel)) in enumerate(zip(shim, reference)):
        steps, (mean_loss, sum_loss, losses) = got
        assert steps == iterations
        # The last step's loss, read before its update.
        loss = _residual(iterations * (run + 1) - 1, n) ** 2
        np.testing.assert_allclose([mean_loss, sum_loss / n, *losses], [loss] * (n + 2), rtol=1e-5)
        np.testing.assert_allclose(kernel, [[(1 + _residual(iterations * (run + 1), n)) / 2]], rtol=1e-5)
        np.testing.assert_allclose([mean_loss, sum_loss, *losses], [ref[1][0], ref[1][1], *ref[1][2]], rtol=1e-6)
        np.testing.assert_allclose(kernel, ref_kernel, rtol=1e-6)
