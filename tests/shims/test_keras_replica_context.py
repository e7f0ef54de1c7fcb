"""Keras 3 in replica context on the fake TPU, with no opt-in.

The TPU guide's custom loop: a Keras model and a Keras 3 optimizer made under
the strategy's scope, not built, and a `tf.function` that runs the step with
`strategy.run`; the optimizer builds its slots on its first `apply_gradients`,
inside the step. On TensorFlow's MirroredStrategy that loop fails
(keras-team/keras#19246's root cause: a collective under a `tf.cond` whose key
is a call-time capture) unless `multi_step_fix()` is started, up to Keras 3.15
(keras-nightly 3.16.0.dev2026102704 runs it); on the fake it trains with no
opt-in, traced once or per replica.
"""

import numpy as np
import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute import testing
from compat_distribute.testing import _fake_tpu

keras = pytest.importorskip("keras")
# Keras 3.16 (its nightlies) no longer fails this loop on MirroredStrategy.
KERAS_FAILS_THE_LOOP_ON_MIRRORED = tuple(int(n) for n in keras.__version__.split(".")[:2]) < (3, 16)

GLOBAL_BATCH = 16
STEPS = 4


def _batches():
    """The same global batch at each step, so the loss falls step by step."""
    rng = np.random.RandomState(0)
    x = rng.randn(GLOBAL_BATCH, 4).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat(STEPS)


def custom_loop_losses(strategy):
    """The per-step losses of the TPU guide's loop with an unbuilt Adam."""
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(1))]
        )
        optimizer = keras.optimizers.Adam(0.1)
    assert not optimizer.built

    @tf.function
    def train_step(iterator):
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(model(x) - y)) / GLOBAL_BATCH
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        per_replica = strategy.run(step, args=next(iterator))
        return strategy.reduce("SUM", per_replica, axis=None)

    iterator = iter(strategy.experimental_distribute_dataset(_batches()))
    return [float(train_step(iterator)) for _ in range(STEPS)]


def fake_tpu_per_replica():
    strategy = compat_distribute.TPUStrategy(testing.FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 2)))
    _fake_tpu.replicate.set_trace_mode(strategy, "per_replica")
    return strategy


@pytest.mark.requires_keras3
def test_a_custom_loop_building_its_optimizer_in_the_step_trains_per_replica():
    one_device = custom_loop_losses(tf.distribute.get_strategy())
    assert all(a > b for a, b in zip(one_device, one_device[1:])), one_device  # it trains
    losses = custom_loop_losses(fake_tpu_per_replica())
    np.testing.assert_allclose(losses, one_device, rtol=1e-5)


@pytest.mark.requires_keras3
def test_that_loop_fails_on_mirrored_strategy_where_the_fake_needs_no_opt_in():
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    one_device = custom_loop_losses(tf.distribute.get_strategy())
    if KERAS_FAILS_THE_LOOP_ON_MIRRORED:
        with pytest.raises(
            tf.errors.InvalidArgumentError, match="You must feed a value for placeholder tensor"
        ):
            custom_loop_losses(mirrored)
    else:
        np.testing.assert_allclose(custom_loop_losses(mirrored), one_device, rtol=1e-5)
    traced_once = compat_distribute.TPUStrategy(testing.FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 2)))
    np.testing.assert_allclose(custom_loop_losses(traced_once), one_device, rtol=1e-5)
