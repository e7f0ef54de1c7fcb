"""Keras' compile under a strategy with steps_per_run, and the Keras advice in messages.

A TF 1.15 notebook built `TPUStrategy(resolver, steps_per_run=N)` and then
compiled and fit a Keras model in its scope, and TF 1.15's Keras ran N steps
per device loop. Here the steps per device loop are counted from the optimizer's
step count at each `on_train_batch_end` (Keras calls it once per execution).
"""

import json
import warnings

import numpy as np
import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute import keras as cd_keras
from compat_distribute import testing
from compat_distribute.testing import _fake_tpu
from keras_helpers import two_cpu_mirrored

keras = pytest.importorskip("keras")

LEGACY_KERAS = {"TF_USE_LEGACY_KERAS": "1"}


def _data():
    rng = np.random.RandomState(0)
    x = rng.randn(64, 4).astype("float32")
    return x, x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")


@pytest.fixture(scope="module", name="mirrored_4_steps")
def mirrored_4_steps_fixture():
    return two_cpu_mirrored(steps_per_run=4)



class StepsSeen(keras.callbacks.Callback):
    """The optimizer's step count at each on_train_batch_end: once per execution."""

    def __init__(self):
        super().__init__()
        self.iterations = []

    def on_train_batch_end(self, batch, logs=None):
        self.iterations.append(int(np.asarray(self.model.optimizer.iterations)))


def notebook_fit(strategy, **compile_kwargs):
    """A TF 1.15 notebook's Keras part: build and compile in the scope, then fit 8 batches."""
    k = keras
    x, y = _data()
    with strategy.scope():
        model = k.Sequential([k.Input((4,)), k.layers.Dense(1)])
        model.compile(optimizer=k.optimizers.SGD(0.05), loss="mse", **compile_kwargs)  # user
    seen = StepsSeen()
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[seen])
    return model, seen.iterations


@pytest.mark.requires_keras3
def test_compile_takes_steps_per_run_where_keras_3_can_run_it():
    # One core: no collective all-reduce, so Keras 3 runs 4 steps per execution.
    with compat_distribute.installed():
        strategy = tf.distribute.experimental.TPUStrategy(
            testing.FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 1)), steps_per_run=4
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error", cd_keras.KerasStepsWarning)
            model, iterations = notebook_fit(strategy)
    assert model.steps_per_execution == 4
    assert iterations == [4, 8]  # 8 batches, 4 steps per device loop


@pytest.mark.requires_keras3
def test_compile_leaves_a_steps_per_execution_the_user_set():
    strategy = compat_distribute.TPUStrategy(
        testing.FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 1)), steps_per_run=4
    )
    model, iterations = notebook_fit(strategy, steps_per_execution=2)
    assert model.steps_per_execution == 2
    assert iterations == [2, 4, 6, 8]


@pytest.mark.requires_keras3
def test_compile_warns_at_the_users_line_where_keras_3_cannot_and_runs_one_step():
    # A MirroredStrategy-based strategy carrying steps_per_run, without the fix
    # for keras-team/keras#19246 (test_keras.py shows 4 steps a call fail there).
    cd_keras.compile_takes_steps_per_run()
    strategy = two_cpu_mirrored(steps_per_run=4)
    with pytest.warns(cd_keras.KerasStepsWarning) as record:
        model, iterations = notebook_fit(strategy)
    assert len(record) == 1
    assert str(record[0].message).startswith(
        "steps_per_run=4 cannot become Keras' steps_per_execution on MirroredStrategy with 2 "
        "replicas"
    )
    assert "start compat_distribute.keras.multi_step_fix() before this call" in str(
        record[0].message
    )
    # The model.compile line of notebook_fit, the user's code here.
    assert (record[0].filename, record[0].lineno) == (__file__, COMPILE_LINE)
    assert model.steps_per_execution == 1
    assert iterations == [1, 2, 3, 4, 5, 6, 7, 8]


@pytest.mark.requires_keras3
@pytest.mark.parametrize("mode", ["once", "per_replica"])
def test_compile_takes_steps_per_run_on_2_replicas_of_the_fake_tpu(mode):
    strategy = compat_distribute.TPUStrategy(
        testing.FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 2)), steps_per_run=4
    )
    _fake_tpu.replicate.set_trace_mode(strategy, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cd_keras.KerasStepsWarning)
        model, iterations = notebook_fit(strategy)
    assert model.steps_per_execution == 4
    assert iterations == [4, 8]


@pytest.mark.requires_keras3
def test_compile_takes_steps_per_run_on_2_replicas_with_the_multi_step_fix():
    cd_keras.compile_takes_steps_per_run()
    strategy = two_cpu_mirrored(steps_per_run=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cd_keras.KerasStepsWarning)
        with cd_keras.multi_step_fix():
            model, iterations = notebook_fit(strategy)
    assert model.steps_per_execution == 4
    assert iterations == [4, 8]


def _line_of(text):
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


COMPILE_LINE = _line_of('loss="mse", **compile_kwargs)  # user')


# TF 1.15 notebook, as written then (tf.contrib names, install() at the top), on
# tf-keras: tf.keras is Keras 2 under TF_USE_LEGACY_KERAS=1.
TF_KERAS_NOTEBOOK = """
    import json, warnings
    import numpy as np
    import tensorflow as tf
    import compat_distribute
    from compat_distribute.testing import fake_tpu
    compat_distribute.install()
    warnings.simplefilter("error", compat_distribute.keras.KerasStepsWarning)

    class StepsSeen(tf.keras.callbacks.Callback):
        iterations = []
        def on_train_batch_end(self, batch, logs=None):
            self.iterations.append(int(self.model.optimizer.iterations.numpy()))

    with fake_tpu("v3-8"):
        resolver = tf.contrib.cluster_resolver.TPUClusterResolver(tpu="")
        tf.contrib.distribute.initialize_tpu_system(resolver)
        strategy = tf.contrib.distribute.TPUStrategy(resolver, steps_per_run=4)
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
            model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
        x = np.random.RandomState(0).randn(64, 4).astype("float32")
        model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0, callbacks=[StepsSeen()])
    print(json.dumps({"module": type(model).__module__.split(".")[0],
                      "steps_per_execution": int(model._steps_per_execution.numpy()),
                      "iterations": StepsSeen.iterations}))
"""


def test_tf_keras_compile_takes_steps_per_run_in_a_tf1_notebook(run_python):
    # Forked from the warm interpreter of tf-keras programs.
    result = run_python(TF_KERAS_NOTEBOOK, timeout=300, env=LEGACY_KERAS, shared_env=True)
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out == {"module": "tf_keras", "steps_per_execution": 4, "iterations": [4, 8]}


# --- the Keras advice follows the Keras in use --------------------------------


# The warning's subject, keras#19246, is a Keras 3 model: the advice text is what
# varies with the TensorFlow version (monkeypatched).
@pytest.mark.requires_keras3
@pytest.mark.parametrize(
    "version, legacy, keras_in_use, advice",
    [
        ((2, 21), None, 3, "or use Keras 2 (tf-keras of your TensorFlow's version, the "
         "[legacy] extra, with TF_USE_LEGACY_KERAS=1)."),
        ((2, 21), "1", 2, "or build the model with tf.keras, which is Keras 2 with "
         "TF_USE_LEGACY_KERAS set."),
        ((2, 15), None, 2, "or build the model with tf.keras, which is Keras 2 on "
         "TensorFlow 2.15."),
        ((2, 15), "1", 2, "or build the model with tf.keras, which is Keras 2 on "
         "TensorFlow 2.15."),
    ],
    ids=["tf2.21", "tf2.21-legacy-keras", "tf2.15", "tf2.15-variable-ignored"],
)
def test_keras_advice_matches_the_keras_in_use(
    monkeypatch, mirrored_4_steps, version, legacy, keras_in_use, advice
):
    monkeypatch.setattr(cd_keras, "_tensorflow_version", lambda: version)
    if legacy is None:
        monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    else:
        monkeypatch.setenv("TF_USE_LEGACY_KERAS", legacy)
    assert cd_keras.tf_keras_version() == keras_in_use
    with pytest.warns(cd_keras.KerasStepsWarning) as record:
        cd_keras.steps_per_execution(mirrored_4_steps, keras.Sequential())
    assert str(record[0].message).endswith(
        "To keep steps_per_execution=4, start compat_distribute.keras.multi_step_fix() "
        "before this call and keep it started through fit(), " + advice
    )
    if keras_in_use == 2:
        assert "TF_USE_LEGACY_KERAS=1" not in str(record[0].message)


def test_tf_keras_version_is_read_from_tensorflow():
    # TensorFlow 2.16 and later put Keras 3 behind tf.keras; 2.15 Keras 2.
    version = tuple(int(p) for p in tf.__version__.split(".")[:2])
    assert cd_keras._tensorflow_version() == version  # pylint: disable=protected-access
    expected = 3 if version >= (2, 16) else 2
    assert cd_keras.tf_keras_version() == expected
    assert cd_keras.keras_major_version(tf.keras.Sequential()) == expected
