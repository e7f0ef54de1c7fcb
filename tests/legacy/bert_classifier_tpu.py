"""Fine-tuning a classifier on a TPU with steps_per_loop, TF 2.0-2.2 style.

Stands for TF Model Garden's `official/nlp/bert/run_classifier.py` on its TPU
path, with `official/utils/misc/tpu_lib.py`'s set-up: a `TPUClusterResolver`,
`experimental_connect_to_cluster`, `initialize_tpu_system`, then
`tf.distribute.experimental.TPUStrategy(resolver)`; the training loop runs
`steps_per_loop` steps per host call in a `tf.range` loop of
`strategy.experimental_run_v2`, with inputs from
`experimental_distribute_datasets_from_function`. Written in this project's
own words; a logistic-regression head on synthetic features stands in for BERT.
"""

import numpy as np
import tensorflow as tf

FEATURES = 8


def tpu_initialize(tpu_address):
    cluster_resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address)
    if tpu_address not in ("", "local"):
        tf.config.experimental_connect_to_cluster(cluster_resolver)
    tf.tpu.experimental.initialize_tpu_system(cluster_resolver)
    return cluster_resolver


def synthetic_examples(count=1024, seed=1):
    rng = np.random.RandomState(seed)
    features = rng.normal(size=(count, FEATURES)).astype(np.float32)
    labels = (features @ np.linspace(-1.0, 1.0, FEATURES) > 0).astype(np.float32)
    return features, labels


def get_dataset_fn(global_batch_size):
    def dataset_fn(ctx):
        batch_size = ctx.get_per_replica_batch_size(global_batch_size)
        features, labels = synthetic_examples()
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        dataset = dataset.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return dataset.repeat().batch(batch_size, drop_remainder=True)

    return dataset_fn


def run_bert_classifier(strategy, epochs=2, steps_per_epoch=12, steps_per_loop=4,
                        global_batch_size=64, learning_rate=0.5):
    """Returns [(global step, loss)] logged after each loop of steps_per_loop steps."""
    with strategy.scope():
        kernel = tf.Variable(tf.zeros([FEATURES, 1]), aggregation=tf.VariableAggregation.MEAN)
        bias = tf.Variable(tf.zeros([1]), aggregation=tf.VariableAggregation.MEAN)
        global_step = tf.Variable(
            0, dtype=tf.int64, trainable=False,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        loss_sum = tf.Variable(0.0, aggregation=tf.VariableAggregation.SUM)
    train_iterator = iter(strategy.experimental_distribute_datasets_from_function(
        get_dataset_fn(global_batch_size)))

    def replicated_step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            logits = tf.squeeze(tf.matmul(features, kernel) + bias, axis=1)
            per_example = tf.nn.sigmoid_cross_entropy_with_logits(labels, logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
        grads = tape.gradient(loss, [kernel, bias])
        grads = tf.distribute.get_replica_context().all_reduce("SUM", grads)
        kernel.assign_sub(learning_rate * grads[0])
        bias.assign_sub(learning_rate * grads[1])
        global_step.assign_add(1)
        loss_sum.assign_add(loss)

    @tf.function
    def train_steps(iterator, steps):
        for _ in tf.range(steps):
            strategy.experimental_run_v2(replicated_step, args=(next(iterator),))

    history = []
    current_step = 0
    total_steps = epochs * steps_per_epoch
    while current_step < total_steps:
        steps = min(steps_per_loop, total_steps - current_step)
        loss_sum.assign(0.0)
        train_steps(train_iterator, tf.convert_to_tensor(steps, dtype=tf.int32))
        current_step += steps
        history.append((int(global_step.numpy()), float(loss_sum.numpy()) / steps))
        print(f"Train Step: {current_step}/{total_steps}  / loss = {history[-1][1]:.6f}")
    return history


def main(tpu="local"):
    resolver = tpu_initialize(tpu)
    strategy = tf.distribute.experimental.TPUStrategy(resolver)
    return run_bert_classifier(strategy)
