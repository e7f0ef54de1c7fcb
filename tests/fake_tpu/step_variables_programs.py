"""Training steps that create their variables on the first call, for test_step_variables.

`guide_loop` is the TPU guide's custom training loop (tensorflow.org/guide/tpu): a
model, an optimizer and a metric made under the strategy's scope and not built, a
`tf.function` step calling `strategy.run`; the first step builds the model's weights
and the optimizer's slots. It is written with `tf.keras`, so one function serves
Keras 3 (in the test process) and tf-keras (`TF_USE_LEGACY_KERAS=1`, read at
import, so in a process of its own). `python step_variables_programs.py one_host`
compares the fake v3-8 with one device there; `... pod` runs the loop on a v4-16
pod, whose host processes cannot start in the test process. Each prints
`RESULT <json>`.
"""

import json
import sys

GLOBAL_BATCH = 16
FEATURES = 6
CLASSES = 3
STEPS = 4
OPTIMIZERS = ("sgd_momentum", "adam")


def _dataset(tf, batch_size):
    """Feature vectors whose class is the block of largest sum; repeated, in one order."""
    import numpy as np

    rng = np.random.RandomState(0)
    features = rng.uniform(size=(8 * GLOBAL_BATCH, FEATURES)).astype(np.float32)
    labels = features.reshape(-1, CLASSES, FEATURES // CLASSES).sum(axis=2).argmax(axis=1)
    return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(batch_size)


def _optimizer(tf, name):
    if name == "adam":
        return tf.keras.optimizers.Adam(0.01)
    return tf.keras.optimizers.SGD(0.1, momentum=0.9)


def guide_loop(strategy, optimizer_name, steps=STEPS, shard=False):
    """The guide's loop, `steps` steps; what the tests compare. `shard`: each host's
    pipeline takes every host-th batch (the guide's feeds every host all of them).

    Returns the per-step losses, the final weights, every optimizer variable's
    copies (one per replica, with their devices), the metric's mean loss, and how
    often the step's Python function and the `tf.function` were traced.
    """
    import tensorflow as tf

    seeded = tf.keras.initializers.GlorotUniform
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(8, activation="relu", kernel_initializer=seeded(seed=1)),
            tf.keras.layers.Dense(CLASSES, kernel_initializer=seeded(seed=2)),
        ])
        optimizer = _optimizer(tf, optimizer_name)
        training_loss = tf.keras.metrics.Mean("training_loss", dtype=tf.float32)

    per_replica_batch_size = GLOBAL_BATCH // strategy.num_replicas_in_sync
    def dataset_fn(context):
        dataset = _dataset(tf, per_replica_batch_size)
        return dataset.shard(context.num_input_pipelines, context.input_pipeline_id) if shard else dataset

    train_dataset = strategy.distribute_datasets_from_function(dataset_fn)
    traces = []

    @tf.function
    def train_step(iterator):
        def step_fn(inputs):
            traces.append(1)
            images, labels = inputs
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
                loss = tf.nn.compute_average_loss(loss, global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))
            training_loss.update_state(loss * strategy.num_replicas_in_sync)
            return loss

        return strategy.reduce("SUM", strategy.run(step_fn, args=(next(iterator),)), axis=None)

    iterator = iter(train_dataset)
    losses = [float(train_step(iterator)) for _ in range(steps)]
    return {
        "losses": losses,
        "weights": [w.numpy().tolist() for w in model.weights],
        "slots": [_copies(strategy, v) for v in optimizer.variables],
        "mean_loss": float(training_loss.result()),
        "step_traces": len(traces),
        "function_traces": train_step.experimental_get_tracing_count(),
        "iterations": int(optimizer.iterations.numpy()),
    }


def _copies(strategy, variable):
    """[(device, value)] of each copy of an optimizer variable (Keras 3 wraps it)."""
    variable = getattr(variable, "value", variable)
    if callable(variable):  # tf-keras: a tf.Variable's value() method
        variable = getattr(variable, "__self__", variable)
    return [(c.device, c.numpy().tolist()) for c in strategy.experimental_local_results(variable)]


def compare_with_one_device(strategy):
    """{optimizer: (fake run, one-device run)} for each optimizer."""
    import tensorflow as tf

    return {
        name: (guide_loop(strategy, name), guide_loop(tf.distribute.OneDeviceStrategy("/cpu:0"), name))
        for name in OPTIMIZERS
    }


def _one_host():
    """The fake v3-8 against one device, for each optimizer (run under tf-keras)."""
    from compat_distribute.testing import devices

    devices.set_virtual_devices(8)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from compat_distribute.testing import FakeTPUClusterResolver  # pylint: disable=g-import-not-at-top
    from compat_distribute.testing import FakeTPUStrategy  # pylint: disable=g-import-not-at-top

    return {
        "keras": tf.keras.__name__.split(".")[0],
        "runs": compare_with_one_device(FakeTPUStrategy(FakeTPUClusterResolver("v3-8"))),
    }


def _pod():
    """The loop on a v4-16 pod (2 hosts of 4 cores) as TPU pod code builds its
    strategy, each host's pipeline sharded, for each optimizer."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from compat_distribute.testing import fake_tpu  # pylint: disable=g-import-not-at-top

    with fake_tpu("v4-16"):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="my-pod")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
        return {name: guide_loop(strategy, name, shard=True) for name in OPTIMIZERS}


def main(program):
    """`python step_variables_programs.py one_host|pod`: prints `RESULT <json>` with
    the program's results and the warnings it raised."""
    import warnings  # pylint: disable=g-import-not-at-top

    from compat_distribute import _exit  # pylint: disable=g-import-not-at-top

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = {"one_host": _one_host, "pod": _pod}[program]()
    result["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    print("RESULT " + json.dumps(result), flush=True)
    _exit.end_process(0)  # atexit clean-up, then no wait on TensorFlow's teardown


if __name__ == "__main__":
    main(*sys.argv[1:])
