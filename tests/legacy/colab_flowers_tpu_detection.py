"""A TF 2.1 Colab Keras notebook: TPU detection, `print(... ['worker'])`, then `model.fit`.

Source: GoogleCloudPlatform/training-data-analyst,
courses/fast-and-lean-data-science/keras_flowers_gputputpupod_tf2.1.ipynb at commit
46825f014ee4035fe62c31eb6f9ea70b65249a79 (the "Detect hardware" cell, the same set-up
as the tensorflow/tpu Keras Colabs of 2019-2022). The detection block below is the
notebook's, line for line; `install()` is added at the top. The flowers pipeline and
the convnet are replaced by small synthetic data and a two-layer model, and the
epochs shrunk. As in the notebook, the global batch grows with the replica count
and `fit` takes a repeated dataset with `steps_per_epoch`. Prints the
notebook's two lines, then one "epoch N loss X" line per epoch.
"""

import compat_distribute

compat_distribute.install()

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

# Detect hardware, return appropriate distribution strategy
try:
    tpu = tf.distribute.cluster_resolver.TPUClusterResolver()  # TPU detection
    print('Running on TPU ', tpu.cluster_spec().as_dict()['worker'])
except ValueError:
    tpu = None

if tpu:
    tf.config.experimental_connect_to_cluster(tpu)
    tf.tpu.experimental.initialize_tpu_system(tpu)
    strategy = tf.distribute.experimental.TPUStrategy(tpu)
else:
    strategy = tf.distribute.get_strategy()

print("REPLICAS: ", strategy.num_replicas_in_sync)

EPOCHS = 4
STEPS_PER_EPOCH = 6
BATCH_SIZE = 8 * strategy.num_replicas_in_sync
CLASSES = 5


def synthetic_flowers(count=512, seed=0):
    """Feature vectors whose class is the block of largest sum."""
    rng = np.random.RandomState(seed)
    features = rng.uniform(size=(count, 4 * CLASSES)).astype(np.float32)
    labels = features.reshape(count, CLASSES, 4).sum(axis=2).argmax(axis=1)
    return features, labels.astype(np.int32)


def get_training_dataset():
    dataset = tf.data.Dataset.from_tensor_slices(synthetic_flowers())
    return dataset.repeat().shuffle(256, seed=1).batch(BATCH_SIZE, drop_remainder=True)


with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(32, activation='relu', input_shape=(4 * CLASSES,)),
        tf.keras.layers.Dense(CLASSES, activation='softmax'),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=0.05),
                  loss='sparse_categorical_crossentropy',
                  metrics=['accuracy'])

history = model.fit(get_training_dataset(), steps_per_epoch=STEPS_PER_EPOCH,
                    epochs=EPOCHS, verbose=0)
for epoch, loss in enumerate(history.history['loss'], 1):
    print(f"epoch {epoch} loss {loss:.6f}")
