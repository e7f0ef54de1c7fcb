"""TensorFlow's own TF 1.14 TPU example: a TF1 Session on `resolver.master()` with the resolver's cluster_def.

Source: tensorflow/tensorflow, tensorflow/contrib/distribute/python/examples/mnist_tf1_tpu.py
at commit 83c879ab0823b52b8b926b605aa8ec34746b88a4. `main()`'s distribution code is
the example's: `tf.contrib.distribute.TPUStrategy(cluster_resolver)`,
`experimental_enable_get_next_as_optional = False`, `make_dataset_iterator`,
`strategy.unwrap(strategy.experimental_run(...))`,
`tf.contrib.distribute.initialize_tpu_system`, then its own `tf.ConfigProto()`
(no soft placement) with `cluster_spec.as_cluster_def()` copied in, and
`tf.Session(cluster_resolver.master(), config=config)`; the program never calls
`strategy.configure`. Changed: `install()` at the top; `import tensorflow.compat.v1
as tf` where TF 1.14 wrote `import tensorflow as tf` (TF 1.x's `tf` was the v1 API);
synthetic 8x8 "digits" and a smaller convnet in place of MNIST. Prints the
example's per-epoch "Training loss" and "Test loss" lines.
"""

import compat_distribute

compat_distribute.install()

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import numpy as np
import tensorflow.compat.v1 as tf

flags.DEFINE_string("tpu", None, "Name of the TPU to use.")
flags.DEFINE_integer("batch_size", 64, "What should be the size of each batch?")
flags.DEFINE_integer("num_epochs", 3, "How many epochs to run?")
flags.DEFINE_float("learning_rate", 0.05, "Learning Rate")
flags.DEFINE_float("momentum", 0.5, "SGD momentum")

FLAGS = flags.FLAGS
NUM_TRAIN_IMAGES = 512
NUM_CLASSES = 4


def create_model():
  return tf.keras.Sequential([
      tf.keras.layers.Reshape(target_shape=[8, 8, 1], input_shape=(8, 8,)),
      tf.keras.layers.Conv2D(4, 3, padding="same", activation=tf.nn.relu),
      tf.keras.layers.MaxPooling2D((4, 4), (4, 4), padding="same"),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(NUM_CLASSES)])


def compute_loss(logits, labels):
  loss = tf.reduce_sum(
      tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=labels))
  # Scale loss by global batch size.
  return loss * (1. / FLAGS.batch_size)


def synthetic_digits(count, seed):
  """Noise images, brighter in the quadrant that is their class."""
  rng = np.random.RandomState(seed)
  labels = rng.randint(NUM_CLASSES, size=count)
  images = rng.uniform(size=(count, 2, 4, 2, 4)).astype(np.float32)
  images[np.arange(count), labels // 2, :, labels % 2, :] += 2.0
  return images.reshape(count, 8, 8), labels.astype(np.int64)


def mnist_datasets():
  train_dataset = tf.data.Dataset.from_tensor_slices(synthetic_digits(NUM_TRAIN_IMAGES, 0))
  test_dataset = tf.data.Dataset.from_tensor_slices(synthetic_digits(128, 1))
  return train_dataset, test_dataset


def main(argv):
  del argv  # Unused.
  tf.disable_v2_behavior()

  cluster_resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
      tpu=FLAGS.tpu)
  strategy = tf.contrib.distribute.TPUStrategy(cluster_resolver)

  # TODO(rxsang): This doesn't work on cloud for some reason
  strategy.extended.experimental_enable_get_next_as_optional = False

  with strategy.scope():
    train_ds, test_ds = mnist_datasets()
    train_ds = train_ds.shuffle(NUM_TRAIN_IMAGES).batch(FLAGS.batch_size)
    test_ds = test_ds.batch(FLAGS.batch_size)

    model = create_model()
    optimizer = tf.keras.optimizers.SGD(FLAGS.learning_rate, FLAGS.momentum)
    training_loss = tf.keras.metrics.Mean("training_loss", dtype=tf.float32)
    training_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
        "training_accuracy", dtype=tf.float32)
    test_loss = tf.keras.metrics.Mean("test_loss", dtype=tf.float32)
    test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
        "test_accuracy", dtype=tf.float32)

    def train_step(inputs):  # pylint: disable=missing-docstring
      images, labels = inputs
      with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = compute_loss(logits, labels)
      grads = tape.gradient(loss, model.variables)
      update_vars = optimizer.apply_gradients(zip(grads, model.variables))
      update_loss = training_loss.update_state(loss)
      update_accuracy = training_accuracy.update_state(labels, logits)

      with tf.control_dependencies([update_vars, update_loss, update_accuracy]):
        return tf.identity(loss)

    def test_step(inputs):
      images, labels = inputs
      logits = model(images, training=False)
      loss = compute_loss(logits, labels)
      update_loss = test_loss.update_state(loss)
      update_accuracy = test_accuracy.update_state(labels, logits)

      with tf.control_dependencies([update_loss, update_accuracy]):
        return tf.identity(loss)

    train_iterator = strategy.make_dataset_iterator(train_ds)
    test_iterator = strategy.make_dataset_iterator(test_ds)

    dist_train = strategy.unwrap(
        strategy.experimental_run(train_step, train_iterator))
    dist_test = strategy.unwrap(
        strategy.experimental_run(test_step, test_iterator))

    training_loss_result = training_loss.result()
    training_accuracy_result = training_accuracy.result()
    test_loss_result = test_loss.result()
    test_accuracy_result = test_accuracy.result()

    tf.contrib.distribute.initialize_tpu_system(cluster_resolver)

    train_iterator_init = train_iterator.initialize()
    test_iterator_init = test_iterator.initialize()

    all_variables = (
        tf.global_variables() +
        training_loss.variables +
        training_accuracy.variables +
        test_loss.variables +
        test_accuracy.variables)

    config = tf.ConfigProto()
    cluster_spec = cluster_resolver.cluster_spec()
    if cluster_spec:
      config.cluster_def.CopyFrom(cluster_spec.as_cluster_def())

    with tf.Session(cluster_resolver.master(), config=config) as session:
      session.run([v.initializer for v in all_variables])

      for epoch in range(0, FLAGS.num_epochs):
        # Train
        print("Starting epoch {}".format(epoch))
        session.run(train_iterator_init)
        while True:
          try:
            session.run(dist_train)
          except tf.errors.OutOfRangeError:
            break
        print("Training loss: {:0.4f}, accuracy: {:0.2f}%".format(
            session.run(training_loss_result),
            session.run(training_accuracy_result) * 100))
        training_loss.reset_states()
        training_accuracy.reset_states()

        # Test
        session.run(test_iterator_init)
        while True:
          try:
            session.run(dist_test)
          except tf.errors.OutOfRangeError:
            break
        print("Test loss: {:0.4f}, accuracy: {:0.2f}%".format(
            session.run(test_loss_result),
            session.run(test_accuracy_result) * 100))
        test_loss.reset_states()
        test_accuracy.reset_states()


if __name__ == "__main__":
  flags.mark_flag_as_required("tpu")
  app.run(main)
