"""A TF1 graph fit loop whose steps per run live in a variable, changed between runs.

Stands for TF 1.14's `tf.keras` `training_distributed.experimental_tpu_fit_loop`
(the graph path of `model.fit` on a TPUStrategy): the strategy's
`steps_per_run` is held in a variable (`K.variable`), the multi-step loop is
built once with `extended.experimental_run_steps_on_iterator(step_fn,
iterator, iterations=steps_per_run_var, initial_loop_values=...)`, and before
the last run of each epoch the variable is set to the steps left
(`K.set_value`), so the same `run_op` runs fewer steps. Written in this
project's own words, without Keras: a linear model, a V1 optimizer, and a
`tf.compat.v1.Variable` in place of `K.variable`. Run as a script; prints the
global step and loss after each run.
"""

import numpy as np
import tensorflow as tf

FLAGS = tf.compat.v1.flags.FLAGS
tf.compat.v1.flags.DEFINE_integer("epochs", 2, "Epochs.")
tf.compat.v1.flags.DEFINE_integer("steps_per_epoch", 10, "Steps per epoch.")
tf.compat.v1.flags.DEFINE_integer("steps_per_run", 4, "Steps per on-device loop.")


def dataset(global_batch_size=32):
    rng = np.random.RandomState(5)
    x = rng.normal(size=(512, 3)).astype(np.float32)
    y = (x @ np.array([[1.5], [-0.5], [2.0]], np.float32)).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(
        global_batch_size, drop_remainder=True)


def main(argv):
    del argv
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    strategy = tf.compat.v1.distribute.experimental.TPUStrategy(
        resolver, steps_per_run=FLAGS.steps_per_run)
    with strategy.scope():
        steps_per_run = tf.compat.v1.Variable(
            FLAGS.steps_per_run, dtype=tf.int32, trainable=False, name="steps_per_run")
        kernel = tf.compat.v1.get_variable("kernel", [3, 1], initializer=tf.zeros_initializer())
        global_step = tf.compat.v1.train.get_or_create_global_step()
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        iterator = strategy.make_dataset_iterator(dataset())

        def step_fn(ctx, inputs):
            def replica_fn(x, y):
                loss = tf.reduce_mean(tf.square(tf.matmul(x, kernel) - y))
                train_op = optimizer.minimize(
                    loss / strategy.num_replicas_in_sync, global_step=global_step)
                with tf.control_dependencies([train_op]):
                    return tf.identity(loss)

            loss = strategy.extended.call_for_each_replica(replica_fn, args=inputs)
            ctx.set_last_step_output("loss", loss, reduce_op=tf.distribute.ReduceOp.MEAN)

        ctx = strategy.extended.experimental_run_steps_on_iterator(
            step_fn, iterator, iterations=steps_per_run,
            initial_loop_values={"loss": tf.constant(1e7)})
    # K.set_value's graph path: one assign op fed through a placeholder.
    steps_value = tf.compat.v1.placeholder(tf.int32, [])
    set_steps_per_run = steps_per_run.assign(steps_value)

    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(iterator.initialize())
        for _ in range(FLAGS.epochs):
            steps_done = 0
            while steps_done < FLAGS.steps_per_epoch:
                steps = min(FLAGS.steps_per_run, FLAGS.steps_per_epoch - steps_done)
                sess.run(set_steps_per_run, {steps_value: steps})  # K.set_value
                _, outputs = sess.run([ctx.run_op, ctx.last_step_outputs])
                steps_done += steps
                print(f"step {sess.run(global_step)} loss {outputs['loss']:.6f}")


if __name__ == "__main__":
    tf.compat.v1.disable_v2_behavior()
    tf.compat.v1.app.run(main)
