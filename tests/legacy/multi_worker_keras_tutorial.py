"""The TF 2.0-2.1 "Multi-worker training with Keras" tutorial, as each worker runs it.

Source: tensorflow/docs, site/en/tutorials/distribute/multi_worker_with_keras.ipynb at
commit 029bf5558c23e9cafb51050cbf5365e16f99878f. `main()` holds the tutorial's cells
in order: `strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()` built
from `TF_CONFIG` (set by the cluster, as on each machine of the tutorial), then
`GLOBAL_BATCH_SIZE = 64 * NUM_WORKERS`, the dataset and the compiled model built in
`strategy.scope()`, and `multi_worker_model.fit(x=train_datasets, epochs=3)` on the
finite, unrepeated dataset. Changed: `install()` at the top; a synthetic dataset
of 1024 8x8 images in place of tfds MNIST, a smaller convnet, and SGD's learning
rate raised from 0.001 so that 3 short epochs show a falling loss, and a fixed seed
for the model's first weights; the tutorial's
single-worker warm-up fit (run before the strategy exists, which the tutorial
warns against on a cluster) is left out. Returns the epoch losses.
"""

import compat_distribute

compat_distribute.install()

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow as tf

BUFFER_SIZE = 10000
BATCH_SIZE = 64
NUM_EXAMPLES = 1024


def make_datasets_unbatched():
  # Noise images, brighter in the quadrant that is their class, in (0., 1.].
  def scale(image, label):
    image = tf.cast(image, tf.float32)
    image /= 255
    return image, label

  rng = np.random.RandomState(0)
  labels = rng.randint(4, size=NUM_EXAMPLES)
  images = rng.randint(0, 128, size=(NUM_EXAMPLES, 2, 4, 2, 4, 1))
  images[np.arange(NUM_EXAMPLES), labels // 2, :, labels % 2, :] += 127
  images = images.reshape(NUM_EXAMPLES, 8, 8, 1).astype(np.uint8)
  dataset = tf.data.Dataset.from_tensor_slices((images, labels.astype(np.int64)))
  return dataset.map(scale).cache().shuffle(BUFFER_SIZE, seed=0)


def build_and_compile_cnn_model():
  tf.keras.utils.set_random_seed(0)  # not the tutorial's: the same start on every run
  model = tf.keras.Sequential([
      tf.keras.layers.Conv2D(8, 3, activation='relu', input_shape=(8, 8, 1)),
      tf.keras.layers.MaxPooling2D(),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(16, activation='relu'),
      tf.keras.layers.Dense(4, activation='softmax')
  ])
  model.compile(
      loss=tf.keras.losses.sparse_categorical_crossentropy,
      optimizer=tf.keras.optimizers.SGD(learning_rate=0.2),
      metrics=['accuracy'])
  return model


def main():
  strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()

  NUM_WORKERS = 2  # pylint: disable=invalid-name
  # Here the batch size scales up by number of workers since
  # `tf.data.Dataset.batch` expects the global batch size. Previously we used 64,
  # and now this becomes 128.
  GLOBAL_BATCH_SIZE = 64 * NUM_WORKERS  # pylint: disable=invalid-name
  with strategy.scope():
    # Creation of dataset, and model building/compiling need to be within
    # `strategy.scope()`.
    train_datasets = make_datasets_unbatched().batch(GLOBAL_BATCH_SIZE)
    multi_worker_model = build_and_compile_cnn_model()
  history = multi_worker_model.fit(x=train_datasets, epochs=3, verbose=0)
  return (strategy.num_replicas_in_sync, int(multi_worker_model.optimizer.iterations.numpy()),
          history.history['loss'])
