"""Keras compile/fit/evaluate under the shims matches training on one device.

The same seeded model is trained on the same batches (no shuffling) with and
without a strategy; a strategy splits each global batch across replicas and
all-reduces the gradients, so the weights must agree to float32 round-off.
Keras 3 runs in this process; Keras 2 (tf-keras, `tf.keras` under
`TF_USE_LEGACY_KERAS=1`) in a subprocess and in cluster workers, since the
variable must be set before TensorFlow first imports Keras. Both Kerases build
the same initial weights from the same seeds, so one reference serves both.
"""

import contextlib
import json
import os
import warnings

import numpy as np
import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute import keras as cd_keras
from compat_distribute.testing import cluster
from compat_distribute import testing
from compat_distribute.testing import _fake_tpu
from keras_helpers import fails_without_the_fakes_own_fix
from keras_helpers import two_cpu_mirrored

keras = pytest.importorskip("keras")

BATCH = 16
# Keras 3's fit makes two distributed iterators an epoch (tracing functions per
# device, most of a fit's time on 8 replicas): 2 epochs, at a rate (SGD 0.08) that
# halves the loss in them.
EPOCHS = 2
LEGACY_KERAS = {"TF_USE_LEGACY_KERAS": "1"}


def _data():
    rng = np.random.RandomState(0)
    x = rng.randn(64, 4).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32") + 1.0
    return x, y


def train(strategy=None, steps_per_execution=1, *, keras_module=None):
    """Builds, fits and evaluates the model; returns (weights, epoch losses, eval loss).

    `steps_per_execution` is an int, or a function of the built model giving
    the keyword arguments of `compile` (to ask the helper, which needs the
    model). `keras_module` is Keras 3 unless given (`tf.keras` for Keras 2).
    """
    k = keras_module or keras
    x, y = _data()
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        model = k.Sequential(
            [
                k.Input((4,)),
                k.layers.Dense(
                    8, activation="tanh", kernel_initializer=k.initializers.GlorotUniform(1)
                ),
                k.layers.Dense(1, kernel_initializer=k.initializers.GlorotUniform(2)),
            ]
        )
        if callable(steps_per_execution):
            compile_kwargs = steps_per_execution(model)
        else:
            compile_kwargs = {"steps_per_execution": steps_per_execution}
        model.compile(optimizer=k.optimizers.SGD(0.08), loss="mse", **compile_kwargs)
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    evaluated = model.evaluate(x, y, batch_size=BATCH, verbose=0)
    return [np.asarray(w) for w in model.get_weights()], history.history["loss"], evaluated


def helper_kwargs(strategy, **kwargs):
    """The `compile` kwargs `keras_compile_kwargs` gives for the model being built."""
    return lambda model: cd_keras.keras_compile_kwargs(strategy, model, **kwargs)


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
    assert cd_keras.steps_per_execution(strategy) == 1
    assert_matches(train(strategy, helper_kwargs(strategy)), reference)


def test_fit_on_one_worker_multi_worker_shim_matches_one_device(reference):
    strategy = compat_distribute.MultiWorkerMirroredStrategy()
    assert strategy.num_replicas_in_sync == 1
    assert_matches(train(strategy, helper_kwargs(strategy)), reference)


def test_steps_per_run_becomes_steps_per_execution_with_one_local_replica(reference):
    # A one-core fake TPU: a MirroredStrategy of one replica, which all-reduces
    # without collectives, so Keras 3's multi-step loop works. Strict: Keras'
    # train step compiles for a TPU (the dataset's unknown batch dimension is
    # static on a TPU).
    strategy = compat_distribute.TPUStrategy(
        testing.FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 1), strict=True), steps_per_run=4
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", cd_keras.KerasStepsWarning)
        assert cd_keras.keras_compile_kwargs(strategy) == {"steps_per_execution": 4}
        assert_matches(train(strategy, helper_kwargs(strategy)), reference)


def test_no_strategy_and_strategies_without_steps_per_run_give_1():
    assert cd_keras.steps_per_execution(tf.distribute.get_strategy()) == 1
    two = two_cpu_mirrored()
    assert cd_keras.steps_per_execution(two, on_unsupported="raise") == 1


def test_keras_is_read_from_the_model():
    major = int(keras.__version__.split(".")[0])  # 3; 2 where TensorFlow 2.15 pins Keras 2
    assert cd_keras.keras_major_version(keras.Sequential([keras.Input((1,))])) == major
    inputs = keras.Input((2,))
    assert cd_keras.keras_major_version(keras.Model(inputs, keras.layers.Dense(1)(inputs))) == major

    class Subclassed(keras.Model):
        def call(self, x):
            return x

    assert cd_keras.keras_major_version(Subclassed()) == major


# The model as Keras 2 sees it: tf.keras is tf-keras under TF_USE_LEGACY_KERAS=1.
KERAS_2_ON_FAKE_TPU = """
    import json, warnings
    import tensorflow as tf
    from compat_distribute.testing import set_virtual_devices
    set_virtual_devices(8)
    import compat_distribute
    from compat_distribute import keras as cd_keras, testing
    import test_keras

    warnings.simplefilter("error", cd_keras.KerasStepsWarning)
    strategy = compat_distribute.TPUStrategy(
        testing.FakeTPUClusterResolver("v3-8"), steps_per_run=4)
    seen = {}

    def compile_kwargs(model):
        seen["keras"] = cd_keras.keras_major_version(model)
        seen["module"] = type(model).__module__.split(".")[0]
        seen["kwargs"] = cd_keras.keras_compile_kwargs(strategy, model)
        return seen["kwargs"]

    weights, losses, evaluated = test_keras.train(
        strategy, compile_kwargs, keras_module=tf.keras)
    print(json.dumps(dict(seen, replicas=strategy.num_replicas_in_sync,
                          weights=[w.tolist() for w in weights],
                          losses=losses, evaluated=evaluated)))
"""


def _from_json(result):
    return (
        [np.asarray(w, np.float32) for w in result["weights"]],
        result["losses"],
        result["evaluated"],
    )


def test_tf_keras_runs_steps_per_run_on_fake_tpu(reference, run_python):
    # Keras 2 runs its multi-step loop without a nested tf.function: N steps
    # per execution work on 8 replicas, so the helper passes steps_per_run on.
    python_path = os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])
    result = run_python(  # forked from the warm interpreter of tf-keras programs
        KERAS_2_ON_FAKE_TPU, timeout=300, env=dict(LEGACY_KERAS, PYTHONPATH=python_path),
        shared_env=True,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["keras"] == 2
    assert out["module"] == "tf_keras"
    assert out["kwargs"] == {"steps_per_execution": 4}
    assert out["replicas"] == 8
    assert_matches(_from_json(out), reference)


@pytest.mark.requires_keras3
def test_keras_multi_step_bug_is_real():
    # keras-team/keras#19246, reproduced: the case the helper steers around.
    # If this starts passing, Keras or TensorFlow fixed it.
    strategy = two_cpu_mirrored()
    assert not cd_keras.multi_step_fix_started()
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="You must feed a value for placeholder tensor"
    ):
        train(strategy, steps_per_execution=2)


def all_reduce_step(strategy):
    """A tf.function whose one replica step all-reduces 1.0 (a collective on 2 replicas)."""

    @tf.function
    def step():
        def replica_fn():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(1.0))

        return strategy.experimental_local_results(strategy.run(replica_fn))[0]

    return step


def test_root_cause_is_tf_cond_dropping_call_time_captures():
    # The bug without Keras: a tf.function that all-reduces, called inside
    # tf.cond in another tf.function. The all-reduce's instance key is a
    # call-time capture; tf.cond drops it, tf.while_loop passes it on.
    strategy = two_cpu_mirrored()
    step = all_reduce_step(strategy)

    @tf.function
    def in_cond():
        return tf.cond(tf.constant(True), step, lambda: tf.constant(0.0))

    @tf.function
    def in_while():
        return tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v + step()), (0, 0.0))[1]

    assert float(in_while()) == 6.0  # 3 iterations of 2 replicas' 1.0
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="You must feed a value for placeholder tensor"
    ):
        in_cond()
    with cd_keras.multi_step_fix():
        fixed_step = all_reduce_step(strategy)  # traced anew, with the fix

        @tf.function
        def in_cond_fixed():
            return tf.cond(tf.constant(True), fixed_step, lambda: tf.constant(0.0))

        assert float(in_cond_fixed()) == 2.0
        assert float(in_cond_fixed()) == 2.0  # a fresh instance key per call


@pytest.mark.requires_keras3
@pytest.mark.parametrize("mode", ["once", "per_replica"])
def test_keras_3_runs_steps_per_run_on_the_fake_tpu_without_an_opt_in(reference, mode):
    # Two cores: the smallest fake TPU whose all-reduce is a collective (8 only
    # take longer to trace). Per replica, as MirroredStrategy runs, the run
    # needs the fix for keras-team/keras#19246 that the fake starts for itself
    # (test_the_fakes_own_fix_is_what_lets_keras_3_run_per_replica).
    strategy = compat_distribute.TPUStrategy(
        testing.FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 2)), steps_per_run=4
    )
    _fake_tpu.replicate.set_trace_mode(strategy, mode)
    assert strategy.num_replicas_in_sync == 2
    assert not cd_keras.multi_step_fix_started()  # no fix for every strategy
    assert cd_keras.multi_step_fix_started(strategy)  # the fake's own
    one_step = train(strategy, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cd_keras.KerasStepsWarning)
        assert cd_keras.keras_compile_kwargs(strategy, keras.Sequential()) == {
            "steps_per_execution": 4
        }
        four_steps = train(strategy, helper_kwargs(strategy))
    # 4 batches an epoch: one execution of 4 steps gives the losses and weights
    # of 4 executions of one step.
    np.testing.assert_allclose(four_steps[1], one_step[1], rtol=1e-6)
    np.testing.assert_allclose(four_steps[2], one_step[2], rtol=1e-6)
    for got, want in zip(four_steps[0], one_step[0]):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert_matches(four_steps, reference)


@pytest.mark.requires_keras3
def test_the_fakes_own_fix_is_what_lets_keras_3_run_per_replica():
    strategy = compat_distribute.TPUStrategy(
        testing.FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 2)), steps_per_run=4
    )
    _fake_tpu.replicate.set_trace_mode(strategy, "per_replica")
    with fails_without_the_fakes_own_fix(strategy):
        train(strategy, steps_per_execution=4)


@pytest.mark.requires_keras3
def test_a_fakes_fix_leaves_other_strategies_as_tensorflow_has_them():
    # The fake's fix covers its own collectives only: a MirroredStrategy used
    # beside it still needs multi_step_fix(), as it does on GPUs.
    fake = compat_distribute.TPUStrategy(
        testing.FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 2)), steps_per_run=4
    )
    mirrored = two_cpu_mirrored()
    assert cd_keras.multi_step_fix_started(fake)
    assert not cd_keras.multi_step_fix_started(mirrored)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="You must feed a value for placeholder tensor"
    ):
        train(mirrored, steps_per_execution=2)
    with cd_keras.multi_step_fix(mirrored):
        assert cd_keras.multi_step_fix_started(mirrored)
        assert not cd_keras.multi_step_fix_started()
        assert len(train(mirrored, steps_per_execution=2)[1]) == EPOCHS


def _shown_capture():
    from compat_distribute import _tf

    return _tf.FuncGraph.capture_call_time_value


def _fix_patches():
    """How many started patches hold the fixed method (fake strategies start their own)."""
    from compat_distribute import _patching, _tf

    return len(_patching.values(_tf.FuncGraph, "capture_call_time_value"))


def test_multi_step_fix_starts_nest_and_restore_tensorflow():
    from compat_distribute import _patching, _tf

    original = _patching.original(_tf.FuncGraph, "capture_call_time_value")
    shown, patches = _shown_capture(), _fix_patches()
    outer = cd_keras.multi_step_fix().start()
    inner = cd_keras.multi_step_fix()
    with inner:
        assert cd_keras.multi_step_fix_started()
        patched = _shown_capture()
        assert patched is not original
        assert _fix_patches() == patches + 2
        with pytest.raises(RuntimeError) as raised:
            inner.start()
        assert str(raised.value) == "this MultiStepFix is already started; stop() it first."
    assert _shown_capture() is patched  # outer still started
    outer.stop()
    outer.stop()  # stopping twice is a no-op
    assert not cd_keras.multi_step_fix_started()
    assert _fix_patches() == patches
    # TensorFlow's own, unless a live fake strategy holds its own fix.
    assert _shown_capture() is shown
    assert shown is (original if patches == 0 else patched)


def test_multi_step_fix_patches_through_the_registry_in_any_order():
    from compat_distribute import _patching, _tf

    name = "capture_call_time_value"
    original = _patching.original(_tf.FuncGraph, name)
    shown, patches = _shown_capture(), _fix_patches()

    def other(*args, **kwargs):  # another patch of the same method
        return original(*args, **kwargs)

    fix = cd_keras.multi_step_fix().start()
    fixed = _shown_capture()
    assert _patching.values(_tf.FuncGraph, name)[-1] is fixed
    patch = _patching.Patch([(_tf.FuncGraph, name, other)]).start()
    assert _shown_capture() is other  # the newest shows
    fix.stop()  # stopped first, under the other patch
    assert not cd_keras.multi_step_fix_started()
    assert _shown_capture() is other
    again = cd_keras.multi_step_fix().start()
    assert _shown_capture() is fixed  # one object for every fix
    patch.stop()
    assert cd_keras.multi_step_fix_started()
    again.stop()
    assert _fix_patches() == patches
    assert _shown_capture() is shown


@pytest.fixture(scope="module", name="mirrored_4_steps")
def mirrored_4_steps_fixture():
    """A MirroredStrategy-based strategy with steps_per_run=4 and no fix: where
    keras-team/keras#19246 applies (the fake TPU fixes its own collectives)."""
    return two_cpu_mirrored(steps_per_run=4)


@pytest.mark.requires_keras3
def test_helper_warns_and_uses_1_where_keras_3_would_fail(reference, mirrored_4_steps):
    strategy = mirrored_4_steps
    with pytest.warns(cd_keras.KerasStepsWarning) as record:
        kwargs = cd_keras.keras_compile_kwargs(strategy, keras.Sequential())
    assert kwargs == {"steps_per_execution": 1}
    assert str(record[0].message) == (
        "steps_per_run=4 cannot become Keras' steps_per_execution on MirroredStrategy "
        "with 2 replicas: Keras 3 fails in fit() with 'You must feed a "
        "value for placeholder tensor' when steps_per_execution > 1 on a "
        "MirroredStrategy-based strategy with 2 or more replicas "
        "(keras-team/keras#19246). Using steps_per_execution=1: the same training, one "
        "step per call. To keep steps_per_execution=4, start "
        "compat_distribute.keras.multi_step_fix() before this call and keep it started "
        "through fit(), or use Keras 2 (tf-keras of your TensorFlow's version, the [legacy] "
        "extra, with TF_USE_LEGACY_KERAS=1)."
    )
    assert record[0].filename == __file__
    # The warning is true: 4 steps a call fail there, the 1 it gives trains.
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="You must feed a value for placeholder tensor"
    ):
        train(strategy, steps_per_execution=4)
    assert_matches(train(strategy, 1), reference)


@pytest.mark.requires_keras3
def test_fit_with_fewer_examples_a_batch_than_replicas_says_so():
    # Keras 3's fit reduces its first batch across replicas: with 4 examples on 8
    # replicas, 4 replicas get none, and TensorFlow's AddN said only that its
    # inputs differ.
    strategy = compat_distribute.TPUStrategy(testing.FakeTPUClusterResolver("v3-8"))
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        model.fit(np.ones((16, 3), "float32"), np.ones((16, 1), "float32"), batch_size=4,
                  verbose=0)
    assert info.value.message == (
        "reduce: the replicas' values differ in shape ([1, 3] on replica 0, [0, 3] on replica "
        "4), and a reduction across replicas adds them up element by element. A batch of 4 "
        "examples split over 8 replicas gives some replicas fewer (or none): make the global "
        "batch size a multiple of the 8 replicas (e.g. batch_size=8 in Keras' fit), or batch "
        "the dataset with drop_remainder=True."
    )


@pytest.mark.requires_keras3
def test_helper_raises_when_asked(mirrored_4_steps):
    with pytest.raises(ValueError) as raised:
        cd_keras.steps_per_execution(
            mirrored_4_steps, keras.Sequential(), on_unsupported="raise"
        )
    assert str(raised.value).startswith("steps_per_run=4 cannot become Keras' ")
    assert str(raised.value).endswith(
        "TF_USE_LEGACY_KERAS=1). Or compile with steps_per_execution=1, or build the "
        "strategy with steps_per_run=1."
    )


NOT_A_STRATEGY = (
    "strategy must be a tf.distribute.Strategy (for example "
    "compat_distribute.TPUStrategy(...), or tf.distribute.get_strategy() outside any "
    "strategy's scope); got {}. Pass the strategy whose scope builds the model."
)
BAD_ON_UNSUPPORTED = (
    "on_unsupported must be one of ('warn', 'raise'); got {}. Pass 'warn' to use "
    "steps_per_execution=1 with a KerasStepsWarning, or 'raise' for a ValueError."
)
NOT_A_MODEL = (
    "model must be a Keras model (keras.Model, or tf_keras.Model for Keras 2); got {}. "
    "Pass the model you compile: keras_compile_kwargs(strategy, model)."
)


@pytest.fixture(scope="module", name="fake_tpu_4_steps")
def fake_tpu_4_steps_fixture():
    return compat_distribute.TPUStrategy(testing.FakeTPUClusterResolver("v3-8"), steps_per_run=4)


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda s: cd_keras.steps_per_execution("abc"), TypeError,
         NOT_A_STRATEGY.format("'abc' (str)")),
        (lambda s: cd_keras.keras_compile_kwargs(None), TypeError,
         NOT_A_STRATEGY.format("None (NoneType)")),
        (lambda s: cd_keras.steps_per_execution(s["fake"], on_unsupported="ignore"), ValueError,
         BAD_ON_UNSUPPORTED.format("'ignore' (str)")),
        (lambda s: cd_keras.steps_per_execution(s["fake"], on_unsupported=None), ValueError,
         BAD_ON_UNSUPPORTED.format("None (NoneType)")),
        (lambda s: cd_keras.steps_per_execution(s["fake"], "abc"), TypeError,
         NOT_A_MODEL.format("'abc' (str)")),
        (lambda s: cd_keras.keras_major_version(3), TypeError,
         NOT_A_MODEL.format("3 (int)")),
        (lambda s: cd_keras.keras_compile_kwargs(s["mirrored"]), TypeError,
         "steps_per_execution needs the model for steps_per_run=4 on MirroredStrategy with 2 "
         "replicas: Keras 2 (tf-keras) runs 4 steps per execution there, Keras 3 cannot "
         "(keras-team/keras#19246). Pass it: keras_compile_kwargs(strategy, model)."),
        (lambda s: cd_keras.multi_step_fix("abc"), TypeError,
         NOT_A_STRATEGY.format("'abc' (str)").replace(
             "the strategy whose scope builds the model", "the strategy to fix, or None for "
             "every strategy")),
        (lambda s: cd_keras.multi_step_fix(tf.distribute.OneDeviceStrategy("/cpu:0")), TypeError,
         "multi_step_fix(strategy) fixes a MirroredStrategy-based strategy (MirroredStrategy, "
         "MultiWorkerMirroredStrategy, the fake TPU); got OneDeviceStrategy, whose all-reduce "
         "is no collective of keras-team/keras#19246. Pass one of those, or None for every "
         "strategy."),
    ],
    ids=["strategy-str", "strategy-none", "on-unsupported-ignore", "on-unsupported-none",
         "model-str", "model-int", "model-missing", "fix-str", "fix-one-device"],
)
def test_bad_arguments_are_named_before_anything_happens(
    call, error, text, fake_tpu_4_steps, mirrored_4_steps
):
    strategies = {"fake": fake_tpu_4_steps, "mirrored": mirrored_4_steps}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no KerasStepsWarning before the error
        with pytest.raises(error) as raised:
            call(strategies)
    assert str(raised.value) == text


def test_the_fake_tpu_needs_no_model_to_take_steps_per_run(fake_tpu_4_steps):
    # No Keras on it fails with 4 steps a call, so which Keras does not matter.
    with warnings.catch_warnings():
        warnings.simplefilter("error", cd_keras.KerasStepsWarning)
        assert cd_keras.keras_compile_kwargs(fake_tpu_4_steps) == {"steps_per_execution": 4}


def fit_in_worker(keras_version, steps, fix):
    """Runs in each worker of a local cluster (TF_USE_LEGACY_KERAS=1: tf.keras is Keras 2).

    The shim has no steps_per_run, so the helper says 1; `steps` is compiled in
    to run the multi-step loop on 2 workers.
    """
    strategy = cluster.worker_strategy(compat_distribute.MultiWorkerMirroredStrategy)
    keras_module = keras if keras_version == 3 else tf.keras
    seen = []

    def compile_kwargs(model):
        seen.append(cd_keras.keras_major_version(model))
        assert cd_keras.keras_compile_kwargs(strategy, model) == {"steps_per_execution": 1}
        return {"steps_per_execution": steps}

    with cd_keras.multi_step_fix() if fix else contextlib.nullcontext():
        result = train(strategy, compile_kwargs, keras_module=keras_module)
    return seen, strategy.num_replicas_in_sync, result


@pytest.fixture(scope="module", name="two_workers")
def two_workers_fixture():
    with cluster.local_cluster(num_workers=2, timeout=240, env=LEGACY_KERAS) as workers:
        yield workers


@pytest.mark.multi_worker
@pytest.mark.parametrize(
    "keras_version, steps, fix",
    [
        pytest.param(3, 1, False, id="keras3", marks=pytest.mark.requires_keras3),
        pytest.param(3, 4, True, id="keras3-4-steps-fixed", marks=pytest.mark.requires_keras3),
        pytest.param(2, 4, False, id="tf-keras-4-steps"),
    ],
)
def test_fit_on_two_workers_matches_one_device(two_workers, reference, keras_version, steps, fix):
    # Each worker sees half of each global batch (Keras shards the data).
    results = two_workers.run(fit_in_worker, keras_version, steps, fix)
    assert len(results) == 2
    for seen, replicas, result in results:
        assert seen == [keras_version]
        assert replicas == 2
        assert_matches(result, reference)

