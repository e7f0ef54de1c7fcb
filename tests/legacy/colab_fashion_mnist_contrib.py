"""The tensorflow/tpu "Fashion MNIST with Keras and TPUs" Colab of TF 1.14: tf.contrib set-up, then `model.fit`.

Source: tensorflow/tpu, tools/colab/fashion_mnist.ipynb at commit
12b678ca099a62467968883de7712e6dffc85e61 (the version for TF 1.14 and later). The
training cell's distribution lines are the notebook's: the resolver from
`'grpc://' + os.environ['COLAB_TPU_ADDR']` by its tf.contrib name,
`tf.contrib.distribute.initialize_tpu_system(resolver)`,
`tf.contrib.distribute.TPUStrategy(resolver)`, compile in `strategy.scope()`,
and `fit` on float32 NumPy arrays with `steps_per_epoch`, `validation_data` and
`validation_freq`. Run as a user runs the notebook on TensorFlow 2.21: unchanged,
so eagerly, with Keras 3. Changed: `install()` at the top; synthetic 8x8 "clothes"
and a small convnet in place of Fashion MNIST and the notebook's three-block
convnet; 3 epochs of 8 steps, validated at the last. Prints one "epoch N loss X"
line per epoch and the validation loss.
"""

import compat_distribute

compat_distribute.install()

# pylint: disable=g-import-not-at-top,wrong-import-position
import os

import numpy as np
import tensorflow as tf


def synthetic_clothes(count, seed):
  """Noise images, brighter in the quadrant that is their class."""
  rng = np.random.RandomState(seed)
  labels = rng.randint(4, size=count)
  images = rng.uniform(size=(count, 2, 4, 2, 4)).astype(np.float32)
  images[np.arange(count), labels // 2, :, labels % 2, :] += 2.0
  return images.reshape(count, 8, 8), labels


(x_train, y_train), (x_test, y_test) = synthetic_clothes(256, 0), synthetic_clothes(64, 1)

# add empty color dimension
x_train = np.expand_dims(x_train, -1)
x_test = np.expand_dims(x_test, -1)


def create_model():
  model = tf.keras.models.Sequential()
  model.add(tf.keras.layers.BatchNormalization(input_shape=x_train.shape[1:]))
  model.add(tf.keras.layers.Conv2D(8, (3, 3), padding='same', activation='elu'))
  model.add(tf.keras.layers.MaxPooling2D(pool_size=(4, 4), strides=(4, 4)))
  model.add(tf.keras.layers.Flatten())
  model.add(tf.keras.layers.Dense(4))
  model.add(tf.keras.layers.Activation('softmax'))
  return model


resolver = tf.contrib.cluster_resolver.TPUClusterResolver('grpc://' + os.environ['COLAB_TPU_ADDR'])
tf.contrib.distribute.initialize_tpu_system(resolver)
strategy = tf.contrib.distribute.TPUStrategy(resolver)

with strategy.scope():
  model = create_model()
  model.compile(
      optimizer=tf.keras.optimizers.Adam(learning_rate=1e-2, ),
      loss='sparse_categorical_crossentropy',
      metrics=['sparse_categorical_accuracy'])

history = model.fit(
    x_train.astype(np.float32), y_train.astype(np.float32),
    epochs=3,
    steps_per_epoch=8,
    validation_data=(x_test.astype(np.float32), y_test.astype(np.float32)),
    validation_freq=3,
    verbose=0,
)
for epoch, loss in enumerate(history.history['loss'], 1):
  print(f"epoch {epoch} loss {loss:.6f}")
print(f"validation loss {history.history['val_loss'][-1]:.6f}")
print("replicas", strategy.num_replicas_in_sync)
