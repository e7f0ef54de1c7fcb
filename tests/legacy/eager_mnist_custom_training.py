"""Eager MNIST with a custom training loop over a distributed dataset, TF 2.0-2.1 style.

Stands for the TF 2.0 tutorials "Custom training with tf.distribute.Strategy"
(the multi-GPU eager MNIST) and "Multi-worker training with a custom loop":
`strategy.experimental_distribute_dataset`, a `@tf.function`
`distributed_train_step` that calls `strategy.experimental_run_v2` and sums the
replicas' losses with `strategy.reduce(SUM, ..., axis=None)`, an epoch loop
iterating over the distributed dataset in Python, and
`tf.distribute.experimental.MultiWorkerMirroredStrategy()` reading `TF_CONFIG`.
Written in this project's own words; 4-class synthetic "digits" stand in for MNIST.
"""

import numpy as np
import tensorflow as tf

PIXELS = 16
CLASSES = 4
BATCH_SIZE_PER_REPLICA = 16
EPOCHS = 3


def synthetic_digits(count=256, seed=3):
    rng = np.random.RandomState(seed)
    images = rng.uniform(size=(count, PIXELS)).astype(np.float32)
    labels = images.reshape(count, CLASSES, -1).sum(axis=2).argmax(axis=1)
    return images, labels.astype(np.int64)


def train(strategy):
    """Returns [(steps so far, mean loss of the epoch)] per epoch."""
    global_batch_size = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
    images, labels = synthetic_digits()
    train_dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(global_batch_size)
    train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)

    with strategy.scope():
        kernel = tf.Variable(tf.zeros([PIXELS, CLASSES]), aggregation=tf.VariableAggregation.MEAN)
        steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

        def compute_loss(labels, logits):
            per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
            return tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            loss = compute_loss(labels, tf.matmul(images, kernel))
        gradient = tape.gradient(loss, kernel)
        gradient = tf.distribute.get_replica_context().all_reduce("SUM", gradient)
        kernel.assign_sub(2.0 * gradient)
        steps.assign_add(1)
        return loss

    @tf.function
    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.experimental_run_v2(train_step, args=(dataset_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    history = []
    for epoch in range(EPOCHS):
        total_loss = 0.0
        num_batches = 0
        for x in train_dist_dataset:
            total_loss += distributed_train_step(x)
            num_batches += 1
        train_loss = total_loss / num_batches
        history.append((int(steps.numpy()), float(train_loss)))
        print(f"Epoch {epoch + 1}, Loss: {float(train_loss):.6f}")
    return history


def main():
    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
    return train(strategy)
