"""Strategies built from command-line flags, as TF Model Garden's distribution_utils did in TF 2.0-2.2.

Stands for `official/utils/misc/distribution_utils.py`'s
`get_distribution_strategy(distribution_strategy, num_gpus, all_reduce_alg,
tpu_address)`: "tpu" initializes the TPU system and returns
`tf.distribute.experimental.TPUStrategy(cluster_resolver)`,
"multi_worker_mirrored" returns
`tf.distribute.experimental.MultiWorkerMirroredStrategy(communication=...)`
with the communication named by `all_reduce_alg`; a small Keras-free training
function then runs on whichever strategy the flags chose, with
`strategy.experimental_run_v2`. Written in this project's own words.
"""

import numpy as np
import tensorflow as tf


def _collective_communication(all_reduce_alg):
    collective_communication_options = {
        None: tf.distribute.experimental.CollectiveCommunication.AUTO,
        "ring": tf.distribute.experimental.CollectiveCommunication.RING,
        "nccl": tf.distribute.experimental.CollectiveCommunication.NCCL,
    }
    if all_reduce_alg not in collective_communication_options:
        raise ValueError(
            "When used with `multi_worker_mirrored`, valid values for "
            "all_reduce_alg are ['ring', 'nccl'].  Supplied value: {}".format(all_reduce_alg))
    return collective_communication_options[all_reduce_alg]


def get_distribution_strategy(distribution_strategy="mirrored", num_gpus=0,
                              all_reduce_alg=None, tpu_address=None):
    distribution_strategy = distribution_strategy.lower()
    if distribution_strategy == "off":
        return None
    if distribution_strategy == "tpu":
        cluster_resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address)
        tf.tpu.experimental.initialize_tpu_system(cluster_resolver)
        return tf.distribute.experimental.TPUStrategy(cluster_resolver)
    if distribution_strategy == "multi_worker_mirrored":
        return tf.distribute.experimental.MultiWorkerMirroredStrategy(
            communication=_collective_communication(all_reduce_alg))
    if distribution_strategy == "one_device":
        return tf.distribute.OneDeviceStrategy("device:CPU:0" if num_gpus == 0 else "device:GPU:0")
    raise ValueError("Unrecognized Distribution Strategy: %r" % distribution_strategy)


def train_with_flags(flags, train_steps=12):
    """Returns [(step, loss)] after each step of a least-squares fit on the chosen strategy."""
    strategy = get_distribution_strategy(
        distribution_strategy=flags["distribution_strategy"],
        all_reduce_alg=flags.get("all_reduce_alg"),
        tpu_address=flags.get("tpu"))
    replicas = strategy.num_replicas_in_sync
    rng = np.random.RandomState(4)
    x = rng.normal(size=(64 * replicas, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8 * replicas)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    with strategy.scope():
        w = tf.Variable(tf.zeros([3]), aggregation=tf.VariableAggregation.MEAN)
        step = tf.Variable(0, dtype=tf.int64, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def step_fn(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.linalg.matvec(features, w) - labels)) / replicas
        grad = tf.distribute.get_replica_context().all_reduce("SUM", tape.gradient(loss, w))
        w.assign_sub(0.1 * grad)
        step.assign_add(1)
        return loss

    @tf.function
    def train_step(iterator):
        per_replica = strategy.experimental_run_v2(step_fn, args=(next(iterator),))
        return strategy.reduce("SUM", per_replica, axis=None)

    history = []
    for _ in range(train_steps):
        loss = train_step(iterator)
        history.append((int(step.numpy()), float(loss)))
    return history
