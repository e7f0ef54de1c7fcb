"""Keras 3 and input programs on fake pods, run in a client process of their own by
test_pod_keras.py (`python pod_keras_programs.py NAME [ARG]`, as pod_programs.py).

The data is small and seeded; the one-device runs that the pod runs are compared
with happen in the same client process, on the default device that connecting
sets (host 0's first core).
"""

import os

import numpy as np

from pod_programs import main

FEATURES = 4
# Points of a seeded linear rule, labelled 1 where it is positive.
_WEIGHTS = np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")


def points(count, seed=0):
    x = np.random.RandomState(seed).randn(count, FEATURES).astype("float32")
    return x, (x @ _WEIGHTS > 0).astype("float32")


def write_tfrecords(directory, name, x, y, files):
    """`x, y` as `files` TFRecord files of tf.train.Examples; their paths."""
    import tensorflow as tf

    paths = []
    for k, (xs, ys) in enumerate(zip(np.array_split(x, files), np.array_split(y, files))):
        paths.append(os.path.join(directory, f"{name}-{k}.tfrecord"))
        with tf.io.TFRecordWriter(paths[-1]) as writer:
            for a, b in zip(xs, ys):
                feature = {
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=a)),
                    "y": tf.train.Feature(float_list=tf.train.FloatList(value=b)),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    return paths


def read_tfrecords(paths, batch):
    """Batches of the files' examples: a dataset whose cardinality is unknown."""
    import tensorflow as tf

    spec = {
        "x": tf.io.FixedLenFeature([FEATURES], tf.float32),
        "y": tf.io.FixedLenFeature([1], tf.float32),
    }

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        return example["x"], example["y"]

    return tf.data.TFRecordDataset(paths).map(parse).batch(batch, drop_remainder=True)


def classifier(optimizer="adam"):
    """A seeded two-layer classifier, compiled with accuracy."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(8, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(1)),
            keras.layers.Dense(1, activation="sigmoid", kernel_initializer=keras.initializers.GlorotUniform(2)),
        ]
    )
    model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
    return model


def classifier_results(weights, x, y):
    """[binary cross-entropy, accuracy] of `classifier` with `weights` on all of `x, y`."""
    kernel, bias, out_kernel, out_bias = (w.astype("float64") for w in weights)
    logits = np.maximum(x @ kernel + bias, 0.0) @ out_kernel + out_bias
    p = np.clip(1.0 / (1.0 + np.exp(-logits)), 1e-7, 1 - 1e-7)
    loss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    return [float(loss), float(np.mean((p > 0.5) == y))]


def _outcome(call):
    """("value", result) or (error type, first line of its message)."""
    try:
        return ["value", call()]
    except Exception as e:  # pylint: disable=broad-except
        return [type(e).__name__, str(e).strip().splitlines()[0]]


def ends_of_data(directory):
    """A v4-16 set up as TPU pod code does (`fake_tpu`, connect, initialize): steps
    past the end of a dataset of unknown cardinality, and Keras 3 `evaluate` of a
    TFRecord set."""
    import tensorflow as tf

    from compat_distribute.testing import fake_tpu

    out = {}
    with fake_tpu("v4-16"):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
        replicas = strategy.num_replicas_in_sync
        # 2 global batches; the filter hides the cardinality, as files do.
        batches = tf.data.Dataset.range(2 * replicas).batch(replicas).filter(lambda b: True)
        out["cardinality"] = int(batches.cardinality())
        dataset = strategy.experimental_distribute_dataset(batches)

        @tf.function
        def step(iterator):
            per_replica = strategy.run(tf.reduce_sum, args=(next(iterator),))
            return strategy.reduce("SUM", per_replica, axis=None)

        iterator = iter(dataset)
        # The call itself raises at the end; reading a result never does.
        out["steps"] = [_outcome(lambda: int(step(iterator))) for _ in range(3)]

        @tf.function
        def optional_step(iterator):
            return iterator.get_next_as_optional().has_value()

        iterator = iter(dataset)
        out["optional_steps"] = [bool(optional_step(iterator)) for _ in range(3)]

        x, y = points(256)
        paths = write_tfrecords(directory, "validation", x, y, files=2)
        with strategy.scope():
            model = classifier()
        validation = read_tfrecords(paths, 8 * replicas)
        out["evaluate"] = model.evaluate(validation, verbose=0)
        out["evaluate_again"] = model.evaluate(validation, verbose=0)
        out["expected"] = classifier_results(model.get_weights(), x, y)
    return out


def _regressor():
    """A seeded regressor with Adam (whose slots a checkpoint holds)."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(3)),
            keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(4)),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    return model


def regression_data():
    x, _ = points(64, seed=1)
    return x, x @ _WEIGHTS + 1.0


def fit_one_epoch(model):
    x, y = regression_data()
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)


def state(model):
    """What a checkpoint restores: the weights and the optimizer's step count."""
    return {
        "weights": [w.tolist() for w in model.get_weights()],
        "iterations": int(model.optimizer.iterations.numpy()),
    }


def checkpoints(directory):
    """A v4-16 built as the README's Use 1 builds it, without `fake_tpu()`:
    restores a one-host checkpoint and weights file, trains on, saves its own."""
    import tensorflow as tf

    import compat_distribute
    from compat_distribute.testing import FakeTPUClusterResolver

    resolver = FakeTPUClusterResolver("v4-16")
    strategy = compat_distribute.TPUStrategy(resolver, steps_per_run=1)
    out = {"replicas": [strategy.num_replicas_in_sync, strategy.extended.num_hosts]}
    with strategy.scope():
        model = _regressor()
        from_weights = _regressor()
        from_weights.optimizer.build(from_weights.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    status = checkpoint.restore(os.path.join(directory, "one_host-1"))
    out["restored"] = state(model)  # the optimizer's slots wait for its first step
    fit_one_epoch(model)
    status.assert_consumed()
    out["trained_on"] = state(model)
    from_weights.load_weights(os.path.join(directory, "one_host.weights.h5"))
    out["loaded"] = state(from_weights)
    out["pod_checkpoint"] = checkpoint.save(os.path.join(directory, "pod"))
    model.save_weights(os.path.join(directory, "pod.weights.h5"))
    resolver.pod.stop()
    return out


def checkpoints_then_ends_of_data(directory):
    """`checkpoints`, then `ends_of_data` on a pod of its own: one client for both
    (a stopped pod leaves the process's context, as the pod tests show)."""
    return {"checkpoints": checkpoints(directory), "ends_of_data": ends_of_data(directory)}


PROGRAMS = {"checkpoints_then_ends_of_data": checkpoints_then_ends_of_data}


if __name__ == "__main__":
    main(PROGRAMS)
