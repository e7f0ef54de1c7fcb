"""Keras 3 compile/fit/evaluate under the shims matches training on one device.

The same seeded model is trained on the same batches (no shuffling) with and
without a strategy; a strategy splits each global batch across replicas and
all-reduces the gradients, so the weights must agree to float32 round-off.
"""

import contextlib
import warnings

import numpy as np
import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute import keras as cd_keras
from compat_distribute.testing import cluster
from compat_distribute import testing

keras = pytest.importorskip("keras")

BATCH = 16
EPOCHS = 3


def _data():
    rng = np.random.RandomState(0)
    x = rng.randn(64, 4).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32") + 1.0
    return x, y


def train(strategy=None, steps_per_execution=1):
    """Builds, fits and evaluates the model; returns (weights, epoch losses, eval loss)."""
    x, y = _data()
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        model = keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(
                    8, activation="tanh", kernel_initializer=keras.initializers.GlorotUniform(1)
                ),
                keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(2)),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.05),
            loss="mse",
            steps_per_execution=steps_per_execution,
        )
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    evaluated = model.evaluate(x, y, batch_size=BATCH, verbose=0)
    return [np.asarray(w) for w in model.get_weights()], history.history["loss"], evaluated


@pytest.fixture(scope="module", name="reference")
def reference_fixture():
    return train()


def assert_matches(result, reference):
    weights, losses, evaluated = result
    ref_weights, ref_losses, ref_evaluated = reference
    assert len(weights) == len(ref_weights) == 4
    for got, want in zip(weights, ref_weights):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(evaluated, ref_evaluated, rtol=1e-5)
    # It trained: the loss fell over the epochs.
    assert losses[-1] < 0.5 * losses[0]


def test_reference_training_learns(reference):
    _, losses, evaluated = reference
    assert len(losses) == EPOCHS
    assert evaluated < losses[0]


def test_fit_on_fake_tpu_matches_one_device(reference):
    strategy = compat_distribute.TPUStrategy(testing.FakeTPUClusterResolver("v3-8"))
    assert strategy.num_replicas_in_sync == 8
    assert_matches(train(strategy, cd_keras.steps_per_execution(strategy)), reference)


def test_fit_on_one_worker_multi_worker_shim_matches_one_device(reference):
    strategy = compat_distribute.MultiWorkerMirroredStrategy()
    assert strategy.num_replicas_in_sync == 1
    assert_matches(train(strategy, **cd_keras.keras_compile_kwargs(strategy)), reference)


def test_steps_per_run_becomes_steps_per_execution_with_one_local_replica(reference):
    # A one-core fake TPU: a MirroredStrategy of one replica, where Keras'
    # multi-step loop works. Strict: Keras' train step compiles for a TPU (the
    # dataset's unknown batch dimension is static on a TPU).
    strategy = compat_distribute.TPUStrategy(
        testing.FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 1), strict=True), steps_per_run=4
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", cd_keras.KerasStepsWarning)
        assert cd_keras.keras_compile_kwargs(strategy) == {"steps_per_execution": 4}
    assert_matches(train(strategy, 4), reference)


def test_no_strategy_and_strategies_without_steps_per_run_give_1():
    assert cd_keras.steps_per_execution(tf.distribute.get_strategy()) == 1
    two = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert cd_keras.steps_per_execution(two, on_unsupported="raise") == 1


def test_keras_multi_step_bug_is_real():
    # keras-team/keras#19246, reproduced: the case the helper steers around.
    # If this starts passing, Keras fixed it and the helper can pass N through.
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="You must feed a value for placeholder tensor"
    ):
        train(strategy, steps_per_execution=2)


def test_helper_warns_and_uses_1_where_keras_would_fail(reference):
    strategy = compat_distribute.TPUStrategy(
        testing.FakeTPUClusterResolver("v3-8"), steps_per_run=4
    )
    with pytest.warns(cd_keras.KerasStepsWarning) as record:
        kwargs = cd_keras.keras_compile_kwargs(strategy)
    assert kwargs == {"steps_per_execution": 1}
    assert str(record[0].message) == (
        "steps_per_run=4 cannot become Keras' steps_per_execution on FakeTPUStrategy "
        "with 8 replicas: Keras 3 fails in fit() with 'You must feed a "
        "value for placeholder tensor' when steps_per_execution > 1 on a "
        "MirroredStrategy-based strategy with 2 or more replicas "
        "(keras-team/keras#19246). Using steps_per_execution=1: the same training, one "
        "step per call."
    )
    assert record[0].filename == __file__
    assert_matches(train(strategy, **kwargs), reference)


def test_helper_raises_when_asked():
    strategy = compat_distribute.TPUStrategy(
        testing.FakeTPUClusterResolver("v3-8"), steps_per_run=3
    )
    with pytest.raises(
        ValueError,
        match=r"steps_per_run=3 cannot become .* Compile with "
        r"steps_per_execution=1, or build the strategy with steps_per_run=1\.$",
    ):
        cd_keras.steps_per_execution(strategy, on_unsupported="raise")
    with pytest.raises(
        ValueError, match=r"on_unsupported must be one of \('warn', 'raise'\); got 'ignore'"
    ):
        cd_keras.steps_per_execution(strategy, on_unsupported="ignore")


def fit_in_worker():
    """Runs in each worker of a local cluster."""
    strategy = cluster.worker_strategy(compat_distribute.MultiWorkerMirroredStrategy)
    weights, losses, evaluated = train(strategy, **cd_keras.keras_compile_kwargs(strategy))
    return strategy.num_replicas_in_sync, weights, losses, evaluated


@pytest.mark.multi_worker
def test_fit_on_two_workers_matches_one_device(reference):
    # Each worker sees half of each global batch (Keras shards the data).
    with cluster.local_cluster(num_workers=2, timeout=180) as workers:
        results = workers.run(fit_in_worker)
    assert len(results) == 2
    for replicas, *result in results:
        assert replicas == 2
        assert_matches(tuple(result), reference)
