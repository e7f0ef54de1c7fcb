"""The Keras guide "Writing your own callbacks" (TF 2.2), on a Colab TPU.

Source: keras-team/keras-io, guides/writing_your_own_callbacks.py at commit
040e8ba4b4bf32ba42d56130fd0f793bec57d097 (last modified 2020/04/15; `from
tensorflow import keras`). Its callbacks read the per-batch logs:
`LossAndErrorPrintingCallback` prints each batch's loss in `fit` and `evaluate`
and the epoch's loss and mean absolute error, `EarlyStoppingAtMinLoss` stops on
the epoch loss. The guide has no distribution code of its own; the TPU lines are
those of TensorFlow's TPU guide of the time (tensorflow/docs,
site/en/guide/tpu.ipynb: the resolver from `COLAB_TPU_ADDR`, connect, initialize,
`tf.distribute.TPUStrategy`, and the model built and compiled in
`strategy.scope()`). Changed: `install()` at the top; synthetic data in place of
MNIST and a seed (so that runs on different hardware compare); fewer epochs;
`np.inf` for NumPy 2's removed `np.Inf`; the sections that print only log keys
or schedule the learning rate are left out. Prints the replica count, then the
guide's lines.
"""

import compat_distribute

compat_distribute.install()

# pylint: disable=g-import-not-at-top,wrong-import-position
import os

import numpy as np
import tensorflow as tf
from tensorflow import keras

resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
    tpu="grpc://" + os.environ["COLAB_TPU_ADDR"]
)
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.TPUStrategy(resolver)
print("replicas", strategy.num_replicas_in_sync)


# Define the Keras model to add callbacks to
def get_model():
    with strategy.scope():
        model = keras.Sequential()
        model.add(keras.layers.Dense(1, input_dim=784))
        model.compile(
            optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
            loss="mean_squared_error",
            metrics=["mean_absolute_error"],
        )
    return model


keras.utils.set_random_seed(0)
# Synthetic "MNIST": 784 pixels in [0, 1), labels 0-9 that depend on them.
rng = np.random.RandomState(0)
x_train = rng.uniform(size=(1000, 784)).astype("float32")
y_train = np.floor(10 * x_train[:, :10].mean(axis=1)).astype("uint8")
x_test = rng.uniform(size=(1000, 784)).astype("float32")
y_test = np.floor(10 * x_test[:, :10].mean(axis=1)).astype("uint8")


class LossAndErrorPrintingCallback(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        print("For batch {}, loss is {:7.2f}.".format(batch, logs["loss"]))

    def on_test_batch_end(self, batch, logs=None):
        print("For batch {}, loss is {:7.2f}.".format(batch, logs["loss"]))

    def on_epoch_end(self, epoch, logs=None):
        print(
            "The average loss for epoch {} is {:7.2f} "
            "and mean absolute error is {:7.2f}.".format(
                epoch, logs["loss"], logs["mean_absolute_error"]
            )
        )


model = get_model()
model.fit(
    x_train,
    y_train,
    batch_size=128,
    epochs=2,
    verbose=0,
    callbacks=[LossAndErrorPrintingCallback()],
)

res = model.evaluate(
    x_test,
    y_test,
    batch_size=128,
    verbose=0,
    callbacks=[LossAndErrorPrintingCallback()],
)


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    """Stop training when the loss is at its min, i.e. the loss stops decreasing.

  Args:
      patience: Number of epochs to wait after min has been hit. After this
      number of no improvement, training stops.
  """

    def __init__(self, patience=0):
        super(EarlyStoppingAtMinLoss, self).__init__()
        self.patience = patience
        # best_weights to store the weights at which the minimum loss occurs.
        self.best_weights = None

    def on_train_begin(self, logs=None):
        # The number of epoch it has waited when loss is no longer minimum.
        self.wait = 0
        # The epoch the training stops at.
        self.stopped_epoch = 0
        # Initialize the best as infinity.
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if np.less(current, self.best):
            self.best = current
            self.wait = 0
            # Record the best weights if current results is better (less).
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = epoch
                self.model.stop_training = True
                print("Restoring model weights from the end of the best epoch.")
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0:
            print("Epoch %05d: early stopping" % (self.stopped_epoch + 1))


model = get_model()
model.fit(
    x_train,
    y_train,
    batch_size=64,
    steps_per_epoch=5,
    epochs=8,
    verbose=0,
    callbacks=[LossAndErrorPrintingCallback(), EarlyStoppingAtMinLoss()],
)
