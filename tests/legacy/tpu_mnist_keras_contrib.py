"""TF 1.14-1.15's Keras MNIST example for Cloud TPU: tf.contrib imports, steps_per_run, graph-mode fit.

Source: tensorflow/tpu, models/experimental/mnist_keras/mnist.py at commit
35f13faebf73ad0a5651cda39a975da82e73018a. `run()`'s distribution lines are the
example's: the `from tensorflow.contrib import ...` imports, the resolver from
`--tpu`, `contrib_distribute.initialize_tpu_system(resolver)`,
`contrib_distribute.TPUStrategy(resolver, steps_per_run=100)`, and compile under
the strategy's scope with a `tf.train` optimizer, then `fit` and `evaluate`.
Changed: `install()` at the top; `import tensorflow.compat.v1 as tf` and
`tf.disable_v2_behavior()` where TF 1.x gave both by default; synthetic 8x8
"digits" and a smaller convnet in place of MNIST; 3 epochs. Prints one
"epoch N loss X" line per epoch, then the example's two result lines.
"""

import compat_distribute

compat_distribute.install()

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import numpy as np
import tensorflow.compat.v1 as tf
from tensorflow.contrib import cluster_resolver as contrib_cluster_resolver
from tensorflow.contrib import distribute as contrib_distribute

flags.DEFINE_string('tpu', '', 'Name of the TPU to use.')

BATCH_SIZE = 64  # a multiple of 8, as the example asks
NUM_CLASSES = 4
EPOCHS = 3
IMG_ROWS, IMG_COLS = 8, 8

FLAGS = flags.FLAGS


def synthetic_digits(count, seed):
    """Noise images, brighter in the quadrant that is their class."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(NUM_CLASSES, size=count)
    images = rng.uniform(size=(count, 2, 4, 2, 4)).astype(np.float32)
    images[np.arange(count), labels // 2, :, labels % 2, :] += 2.0
    return images.reshape(count, IMG_ROWS, IMG_COLS), labels


def mnist_model(input_shape):
    model = tf.keras.models.Sequential()
    model.add(tf.keras.layers.Conv2D(8, kernel_size=(3, 3), activation='relu',
                                     padding='same', input_shape=input_shape))
    model.add(tf.keras.layers.MaxPooling2D(pool_size=(4, 4)))
    model.add(tf.keras.layers.Flatten())
    model.add(tf.keras.layers.Dense(NUM_CLASSES, activation='softmax'))
    return model


def run():
    resolver = contrib_cluster_resolver.TPUClusterResolver(tpu=FLAGS.tpu)
    contrib_distribute.initialize_tpu_system(resolver)
    strategy = contrib_distribute.TPUStrategy(resolver, steps_per_run=100)

    x_train, y_train = synthetic_digits(1024, seed=0)
    x_test, y_test = synthetic_digits(128, seed=1)
    x_train = x_train.reshape(x_train.shape[0], IMG_ROWS, IMG_COLS, 1)
    x_test = x_test.reshape(x_test.shape[0], IMG_ROWS, IMG_COLS, 1)
    input_shape = (IMG_ROWS, IMG_COLS, 1)
    y_train = tf.keras.utils.to_categorical(y_train, NUM_CLASSES)
    y_test = tf.keras.utils.to_categorical(y_test, NUM_CLASSES)
    with strategy.scope():
        model = mnist_model(input_shape)
        model.compile(
            loss=tf.keras.losses.categorical_crossentropy,
            optimizer=tf.train.GradientDescentOptimizer(learning_rate=0.05),
            metrics=['accuracy'])

    history = model.fit(
        x_train,
        y_train,
        batch_size=BATCH_SIZE,
        epochs=EPOCHS,
        verbose=0,
        validation_data=(x_test, y_test))
    for epoch, loss in enumerate(history.history['loss'], 1):
        print(f"epoch {epoch} loss {loss:.6f}")
    return model.evaluate(x_test, y_test, batch_size=BATCH_SIZE, verbose=0)


def main(unused_dev):
    score = run()
    print('Loss for final step: %s;' % score[0])
    print('Accuracy: %s;' % score[1])


if __name__ == '__main__':
    tf.disable_v2_behavior()
    tf.logging.set_verbosity(tf.logging.INFO)
    app.run(main)
