"""TF 1.14 Keras `model.fit` on a TPU strategy in graph mode, run unchanged.

Stands for the programs TF 1.14 Keras ran through its distributed graph path
(`tensorflow/python/keras/engine/training_distributed.py`, reached from
`model.fit` under `tf.compat.v1` graph mode with a distribution strategy), as
in the TF 1.14 "Keras on TPU" set-up: resolve and initialise the TPU, build
and compile the model under the strategy's scope with a `tf.train` optimizer
(TF 1.12-1.13's Keras TPU path required one), fit on a `tf.data` pipeline of
static batch shape with `steps_per_epoch`.

`PROGRAM` is that code under TF 2.21's spellings (`tf.compat.v1.` where TF 1.14
wrote `tf.`). It runs in a subprocess, after `compat_distribute.install()` and
inside `fake_tpu()`, with `TF_USE_LEGACY_KERAS=1`: `tf.keras` is then Keras 2
(tf-keras, the `legacy` extra), whose V1 training loop still runs in graph
mode. Keras 3 has no graph mode at all; `test_keras_3_cannot_fit_in_graph_mode`
shows that with the same program.
"""

import json
import textwrap

import numpy as np
import pytest

PROGRAM = textwrap.dedent(
    """
    import numpy as np
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()

    STEPS_PER_EPOCH = 8
    EPOCHS = 3
    GLOBAL_BATCH = 32

    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.compat.v1.distribute.experimental.TPUStrategy(resolver, steps_per_run=4)


    def input_fn():
        rng = np.random.RandomState(0)
        features = rng.randn(256, 4).astype("float32")
        labels = features @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32") + 1.0
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        # A TPU needs static shapes: drop the last partial batch.
        return dataset.repeat().batch(GLOBAL_BATCH, drop_remainder=True)


    class StepCounter(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = 0

        def on_batch_end(self, batch, logs=None):
            self.steps += 1


    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(8, activation="tanh", input_shape=(4,),
                                  kernel_initializer=tf.keras.initializers.glorot_uniform(1)),
            tf.keras.layers.Dense(1, kernel_initializer=tf.keras.initializers.glorot_uniform(2)),
        ])
        model.compile(optimizer=tf.compat.v1.train.GradientDescentOptimizer(0.05), loss="mse")

    counter = StepCounter()
    history = model.fit(input_fn(), epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH,
                        callbacks=[counter], verbose=0)
    """
)

# Runs PROGRAM as it is, then reports what it left behind.
HARNESS = """
    import json, sys, warnings
    import compat_distribute
    from compat_distribute import testing

    compat_distribute.install()
    with testing.fake_tpu(**{fake!r}), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", compat_distribute.keras.KerasStepsWarning)
        program = {{"__name__": "__main__"}}
        exec(compile({program!r}, "keras_graph_fit_program", "exec"), program)
        tf = program["tf"]
        print(json.dumps({{
            "keras": type(program["model"]).__module__.split(".")[0],
            "executing_eagerly": tf.executing_eagerly(),
            "fake_tpu": isinstance(program["strategy"], testing.FakeTPUStrategy),
            "replicas": program["strategy"].num_replicas_in_sync,
            "steps": program["counter"].steps,
            "losses": program["history"].history["loss"],
            "steps_warnings": [
                (str(w.message), w.filename, w.lineno) for w in caught
                if issubclass(w.category, compat_distribute.keras.KerasStepsWarning)
            ],
        }}))
"""

V3_8 = {"topology": "v3-8"}
ONE_CORE = {"mesh_shape": (1, 1, 1, 1)}


def run_harness(run_program, fake, env, program=PROGRAM):
    """HARNESS running `program`, forked from a warm interpreter of `env` (the
    module's runs share it: TF_USE_LEGACY_KERAS is read at TensorFlow's import)."""
    code = textwrap.dedent(HARNESS.format(fake=fake, program=program))
    return run_program(["-c", code], timeout=300, env=env, shared_env=True)


def report(result):
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", name="runs")
def runs_fixture(run_program):
    legacy = {"TF_USE_LEGACY_KERAS": "1"}
    return {
        "fake v3-8": report(run_harness(run_program, V3_8, legacy)),
        "one core": report(run_harness(run_program, ONE_CORE, legacy)),
    }


def test_fit_runs_every_step_in_graph_mode_on_the_fake_tpu(runs):
    run = runs["fake v3-8"]
    assert run["keras"] == "tf_keras"
    assert run["executing_eagerly"] is False
    assert run["fake_tpu"] is True
    assert run["replicas"] == 8
    assert run["steps"] == 3 * 8  # EPOCHS * STEPS_PER_EPOCH
    # One step per call, as on a GPU, not as on a TPU: said once, at compile's line.
    compile_line = next(
        i for i, line in enumerate(PROGRAM.splitlines(), 1) if "model.compile(" in line
    )
    assert [tuple(w) for w in run["steps_warnings"]] == [
        (
            "steps_per_run=4 is not used by tf-keras' TF1 graph-mode fit() on "
            "FakeTPUStrategy: it runs one step per call (the same training, more host "
            "round trips). To run 4 steps per device loop, fit eagerly (without "
            "tf.compat.v1.disable_v2_behavior()): compile then takes steps_per_execution=4.",
            "keras_graph_fit_program",
            compile_line,
        )
    ]
    losses = run["losses"]
    assert len(losses) == 3
    assert losses[0] > losses[1] > losses[2]
    assert losses[2] < 0.2 * losses[0]


def test_eight_replicas_train_as_one(runs):
    # Each global batch of 32 is split 8 ways and the gradients all-reduced:
    # the epoch losses equal those of one core to float32 round-off.
    assert runs["one core"]["replicas"] == 1
    assert runs["one core"]["steps"] == 24
    np.testing.assert_allclose(runs["fake v3-8"]["losses"], runs["one core"]["losses"], rtol=1e-5)


@pytest.mark.requires_keras3
def test_keras_3_cannot_fit_in_graph_mode(run_program):
    # Without TF_USE_LEGACY_KERAS, tf.keras is Keras 3. It takes no tf.train
    # optimizer, and with its own optimizer it still has no graph mode: fit()
    # asks the symbolic dataset cardinality for a Python int.
    keras_3 = {"TF_USE_LEGACY_KERAS": "0"}
    as_written = run_harness(run_program, V3_8, keras_3)
    assert as_written.returncode == 1
    assert as_written.stderr.rstrip().splitlines()[-1].startswith(
        "ValueError: Could not interpret optimizer identifier: "
        "<tensorflow.python.training.gradient_descent.GradientDescentOptimizer object"
    )
    keras_optimizer = PROGRAM.replace(
        "tf.compat.v1.train.GradientDescentOptimizer(0.05)", "tf.keras.optimizers.SGD(0.05)"
    )
    assert keras_optimizer != PROGRAM
    result = run_harness(run_program, V3_8, keras_3, keras_optimizer)
    assert result.returncode == 1
    assert result.stderr.rstrip().splitlines()[-1] == (
        "TypeError: int() argument must be a string, a bytes-like object or a real "
        "number, not 'SymbolicTensor'"
    )


def test_tf_keras_optimizer_objects_need_eager(run_program):
    # tf-keras 2.21's tf.keras.optimizers.SGD is its new optimizer, which reads
    # its hyperparameters with numpy(): in graph mode compile() fails. TF 1.14's
    # tf.keras.optimizers.SGD is tf-keras' tf.keras.optimizers.legacy.SGD; the
    # string "sgd" and tf.compat.v1.train optimizers work as they did.
    keras_optimizer = PROGRAM.replace(
        "tf.compat.v1.train.GradientDescentOptimizer(0.05)", "tf.keras.optimizers.SGD(0.05)"
    )
    result = run_harness(run_program, V3_8, {"TF_USE_LEGACY_KERAS": "1"}, keras_optimizer)
    assert result.returncode == 1
    assert result.stderr.rstrip().splitlines()[-1] == (
        "NotImplementedError: DistributedVariable.numpy() is only available when eager "
        "execution is enabled."
    )
