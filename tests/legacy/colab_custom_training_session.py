"""The tensorflow/tpu TF 1.14 "Custom training" Colab: a hand-written loop in a Session with soft placement.

Source: tensorflow/tpu, tools/colab/custom_training.ipynb at commit
a16546f63173284e99be6463e9a82b12f0b4e117. The distribution code is the notebook's:
`TPU_WORKER = 'grpc://' + os.environ['COLAB_TPU_ADDR']`, the tf.contrib resolver,
`initialize_tpu_system` and `TPUStrategy`, a `tf.train` optimizer and Keras metrics
made in `strategy.scope()`, steps with `tf.gradients` (and the notebook's
`grads * 2`, which repeats the Python list rather than scaling it), its own
`tf.ConfigProto()` with `allow_soft_placement = True` and the resolver's
cluster_def, `tf.Session(target=resolver.master(), config=config)`,
`make_dataset_iterator` inside the session (the test iterator reading the train
dataset, as written), and `strategy.experimental_run(...).values`. Changed:
`install()` at the top; `import tensorflow.compat.v1 as tf` and
`tf.disable_v2_behavior()` where TF 1.14 gave both; synthetic 8x8 "digits" and a
smaller convnet in place of MNIST; 3 epochs; a fixed graph seed (the small model
sometimes starts where it cannot learn in 3 epochs). Prints the notebook's lines.
"""

import compat_distribute

compat_distribute.install()

# pylint: disable=g-import-not-at-top,wrong-import-position
import os

import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_v2_behavior()

assert os.environ['COLAB_TPU_ADDR'], 'Make sure to select TPU from Edit > Notebook settings > Hardware accelerator'
TPU_WORKER = 'grpc://' + os.environ['COLAB_TPU_ADDR']


def create_model(input_shape):
  return tf.keras.Sequential([
      tf.keras.layers.Conv2D(8, kernel_size=(3, 3), activation='relu', padding='same',
                             input_shape=input_shape),
      tf.keras.layers.MaxPooling2D(pool_size=(4, 4)),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(4, activation=tf.nn.softmax),
  ])


def loss(model, x, y):
  logits = model(x)
  return logits, tf.losses.sparse_softmax_cross_entropy(labels=y, logits=logits)


def grad(model, x, y):
  logits, loss_value = loss(model, x, y)
  return logits, loss_value, tf.gradients(loss_value, model.trainable_variables)


def synthetic_digits(count, seed):
  """Noise images, brighter in the quadrant that is their class."""
  rng = np.random.RandomState(seed)
  labels = rng.randint(4, size=count)
  images = rng.uniform(size=(count, 2, 4, 2, 4)).astype(np.float32)
  images[np.arange(count), labels // 2, :, labels % 2, :] += 2.0
  return images.reshape(count, 8, 8), labels


tf.keras.backend.clear_session()
tf.set_random_seed(0)  # not the notebook's: the small model starts the same in every run

resolver = tf.contrib.cluster_resolver.TPUClusterResolver(tpu=TPU_WORKER)
tf.contrib.distribute.initialize_tpu_system(resolver)
strategy = tf.contrib.distribute.TPUStrategy(resolver)

(x_train, y_train), (x_test, y_test) = synthetic_digits(2048, 0), synthetic_digits(256, 1)
input_shape = (8, 8, 1)
x_train = x_train.reshape(x_train.shape[0], *input_shape).astype(np.float32)
x_test = x_test.reshape(x_test.shape[0], *input_shape).astype(np.float32)
y_train, y_test = y_train.astype(np.int64), y_test.astype(np.int64)

BATCH_SIZE = 32
NUM_EPOCHS = 3

with strategy.scope():
  model = create_model(input_shape)

  optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.01)

  training_loss = tf.keras.metrics.Mean('training_loss', dtype=tf.float32)
  training_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
      'training_accuracy', dtype=tf.float32)
  test_loss = tf.keras.metrics.Mean('test_loss', dtype=tf.float32)
  test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
      'test_accuracy', dtype=tf.float32)

with strategy.scope():
  def train_step(inputs):
    x, y = inputs

    logits, loss_value, grads = grad(model, x, y)

    update_loss = training_loss.update_state(loss_value)
    update_accuracy = training_accuracy.update_state(y, logits)

    # Show that this is truly a custom training loop
    # Multiply all gradients by 2.
    grads = grads * 2

    update_vars = optimizer.apply_gradients(
        zip(grads, model.trainable_variables))

    with tf.control_dependencies([update_vars, update_loss, update_accuracy]):
      return tf.identity(loss_value)

  def test_step(inputs):
    x, y = inputs

    logits, loss_value = loss(model, x, y)

    update_loss = test_loss.update_state(loss_value)
    update_accuracy = test_accuracy.update_state(y, logits)

    with tf.control_dependencies([update_loss, update_accuracy]):
      return tf.identity(loss_value)


def run_train():
  # Train
  session.run(train_iterator_init)
  while True:
    try:
      session.run(dist_train)
    except tf.errors.OutOfRangeError:
      break
  print('Train loss: {:0.4f}\t Train accuracy: {:0.4f}%'.format(
      session.run(training_loss_result),
      session.run(training_accuracy_result) * 100))
  training_loss.reset_states()
  training_accuracy.reset_states()


def run_test():
  # Test
  session.run(test_iterator_init)
  while True:
    try:
      session.run(dist_test)
    except tf.errors.OutOfRangeError:
      break
  print('Test loss: {:0.4f}\t Test accuracy: {:0.4f}%'.format(
      session.run(test_loss_result),
      session.run(test_accuracy_result) * 100))
  test_loss.reset_states()
  test_accuracy.reset_states()


with strategy.scope():
  training_loss_result = training_loss.result()
  training_accuracy_result = training_accuracy.result()
  test_loss_result = test_loss.result()
  test_accuracy_result = test_accuracy.result()

  config = tf.ConfigProto()
  config.allow_soft_placement = True
  cluster_spec = resolver.cluster_spec()
  if cluster_spec:
    config.cluster_def.CopyFrom(cluster_spec.as_cluster_def())

  print('Starting training...')

  # Do all the computations inside a Session (as opposed to doing eager mode)
  with tf.Session(target=resolver.master(), config=config) as session:
    all_variables = (
        tf.global_variables() + training_loss.variables +
        training_accuracy.variables + test_loss.variables +
        test_accuracy.variables)

    train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(BATCH_SIZE, drop_remainder=True)
    train_iterator = strategy.make_dataset_iterator(train_dataset)

    test_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(BATCH_SIZE, drop_remainder=True)
    test_iterator = strategy.make_dataset_iterator(train_dataset)

    train_iterator_init = train_iterator.initialize()
    test_iterator_init = test_iterator.initialize()

    session.run([v.initializer for v in all_variables])

    dist_train = strategy.experimental_run(train_step, train_iterator).values
    dist_test = strategy.experimental_run(test_step, test_iterator).values

    # Custom training loop
    for epoch in range(0, NUM_EPOCHS):
      print('Starting epoch {}'.format(epoch))

      run_train()

      run_test()
