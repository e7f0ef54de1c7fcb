"""A TF1 TPU training script: MNIST-style softmax regression in a graph, a Session, steps_per_run.

Stands for the TF 1.12-1.15 contrib-era TPU MNIST examples that trained with a
distribution strategy instead of TPUEstimator: build the strategy with
`steps_per_run`, an iterator with `make_dataset_iterator`, one on-device loop
with `extended.experimental_run_steps_on_iterator`, then `sess.run(ctx.run_op)`
in a Python loop. As `tf_upgrade_v2` leaves such a script: `tf.compat.v1`
spellings, unchanged otherwise. Written in this project's own words; tiny
synthetic data in place of MNIST. Run as a script; prints one line per loop.
"""

import numpy as np
import tensorflow as tf

FLAGS = tf.compat.v1.flags.FLAGS
tf.compat.v1.flags.DEFINE_string("tpu", "local", "The TPU to use.")
tf.compat.v1.flags.DEFINE_integer("train_steps", 24, "Total training steps.")
tf.compat.v1.flags.DEFINE_integer("steps_per_run", 4, "Steps per on-device loop.")
tf.compat.v1.flags.DEFINE_integer("batch_size", 32, "Global batch size.")
tf.compat.v1.flags.DEFINE_float("learning_rate", 0.5, "SGD learning rate.")

NUM_CLASSES = 4
PIXELS = 16


def synthetic_digits(seed=0, count=512):
    """Images whose class is the brightest of four pixel blocks."""
    rng = np.random.RandomState(seed)
    images = rng.uniform(size=(count, PIXELS)).astype(np.float32)
    labels = images.reshape(count, NUM_CLASSES, -1).sum(axis=2).argmax(axis=1)
    return images, labels.astype(np.int32)


def train_input_fn(batch_size):
    images, labels = synthetic_digits()
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    return dataset.repeat().batch(batch_size, drop_remainder=True)


def model_fn(images):
    with tf.compat.v1.variable_scope("softmax"):
        weights = tf.compat.v1.get_variable(
            "weights", [PIXELS, NUM_CLASSES], initializer=tf.compat.v1.zeros_initializer()
        )
        bias = tf.compat.v1.get_variable(
            "bias", [NUM_CLASSES], initializer=tf.compat.v1.zeros_initializer()
        )
    return tf.matmul(images, weights) + bias


def main(argv):
    del argv
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=FLAGS.tpu)
    strategy = tf.compat.v1.distribute.experimental.TPUStrategy(
        resolver, steps_per_run=FLAGS.steps_per_run
    )
    with strategy.scope():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(FLAGS.learning_rate)
        iterator = strategy.make_dataset_iterator(train_input_fn(FLAGS.batch_size))

        def step_fn(ctx, inputs):
            def replica_step(images, labels):
                logits = model_fn(images)
                loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
                train_op = optimizer.minimize(
                    loss / strategy.num_replicas_in_sync, global_step=global_step
                )
                with tf.control_dependencies([train_op]):
                    return tf.identity(loss)

            loss = strategy.extended.call_for_each_replica(replica_step, args=inputs)
            ctx.set_last_step_output("loss", loss, reduce_op=tf.distribute.ReduceOp.MEAN)

        ctx = strategy.extended.experimental_run_steps_on_iterator(
            step_fn, iterator, iterations=strategy.steps_per_run,
            initial_loop_values={"loss": tf.constant(1e7)},
        )
        loss = ctx.last_step_outputs["loss"]

    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    strategy.configure(session_config=config)
    with tf.compat.v1.Session(resolver.master(), config=config) as sess:
        sess.run(strategy.initialize())
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(iterator.initialize())
        for _ in range(FLAGS.train_steps // FLAGS.steps_per_run):
            _, loss_value = sess.run([ctx.run_op, loss])
            print(f"step {sess.run(global_step)} loss {loss_value:.6f}")
        sess.run(strategy.finalize())


if __name__ == "__main__":
    tf.compat.v1.disable_v2_behavior()
    tf.compat.v1.app.run(main)
