"""A custom training loop in the style of Model Garden's model_training_utils, TF 2.0-2.1.

Stands for `official/modeling/model_training_utils.py`'s
`run_customized_training_loop`: `train_steps(iterator, steps)` is a
`tf.function` whose `tf.range` loop calls `strategy.experimental_run_v2`,
the host loop runs `steps_per_loop` steps per call and logs the mean training
loss of each loop, and `strategy.reduce(SUM, ..., axis=None)` sums the
replicas' losses. Here under `tf.distribute.experimental.MultiWorkerMirroredStrategy(
communication=CollectiveCommunication.RING)`, built from `TF_CONFIG` as on a
multi-worker job. Written in this project's own words; a linear regression on
synthetic data stands in for the model.
"""

import numpy as np
import tensorflow as tf

WIDTH = 4


def synthetic_regression(count=512, seed=2):
    rng = np.random.RandomState(seed)
    x = rng.normal(size=(count, WIDTH)).astype(np.float32)
    y = (x @ np.array([2.0, -1.0, 0.5, 3.0], np.float32) + 1.0).astype(np.float32)
    return x, y


def run_customized_training_loop(strategy, steps_per_epoch=8, epochs=2, steps_per_loop=4,
                                 global_batch_size=32, learning_rate=0.1):
    """Returns [(global step, mean loss of the loop)] for each host loop."""
    features, targets = synthetic_regression()
    dataset = tf.data.Dataset.from_tensor_slices((features, targets)).repeat()
    dataset = dataset.batch(global_batch_size, drop_remainder=True)
    train_iterator = iter(strategy.experimental_distribute_dataset(dataset))
    with strategy.scope():
        weights = tf.Variable(tf.zeros([WIDTH]), aggregation=tf.VariableAggregation.MEAN)
        bias = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)
        global_step = tf.Variable(
            0, dtype=tf.int64, trainable=False,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def _replicated_step(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            prediction = tf.linalg.matvec(x, weights) + bias
            loss = tf.nn.compute_average_loss(
                tf.square(prediction - y), global_batch_size=global_batch_size)
        grads = tape.gradient(loss, [weights, bias])
        grads = tf.distribute.get_replica_context().all_reduce("SUM", grads)
        weights.assign_sub(learning_rate * grads[0])
        bias.assign_sub(learning_rate * grads[1])
        global_step.assign_add(1)
        return loss

    @tf.function
    def train_steps(iterator, steps):
        total = tf.constant(0.0)
        for _ in tf.range(steps):
            per_replica_loss = strategy.experimental_run_v2(
                _replicated_step, args=(next(iterator),))
            total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)
        return total / tf.cast(steps, tf.float32)

    history = []
    current_step = 0
    total_training_steps = steps_per_epoch * epochs
    while current_step < total_training_steps:
        steps = min(steps_per_loop, total_training_steps - current_step)
        train_loss = train_steps(train_iterator, tf.convert_to_tensor(steps, dtype=tf.int32))
        current_step += steps
        history.append((int(global_step.numpy()), float(train_loss.numpy())))
    return history


def main():
    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy(
        communication=tf.distribute.experimental.CollectiveCommunication.RING)
    return run_customized_training_loop(strategy)
