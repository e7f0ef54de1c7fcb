"""What the Keras test modules share: stock MirroredStrategies of their own."""

import tensorflow as tf

from compat_distribute.testing import _tf as testing_tf


def two_cpu_mirrored(steps_per_run=None):
    """A stock MirroredStrategy on 2 CPUs, with collective keys no other strategy uses.

    Every MirroredStrategy numbers its collective keys from one class-level
    base. On TensorFlow 2.15 a second strategy on the same CPUs reuses the
    first one's keys, and an all-reduce of another shape under the same key
    aborts every collective of the process ("Shape mismatch in the
    collective instance 100"). The key base is read by __init__.

    `steps_per_run`: set on its extended, as a strategy carrying TF1's
    steps_per_run would have it (the TPU shim's way), for the Keras helpers.
    """
    strategy = tf.distribute.MirroredStrategy.__new__(tf.distribute.MirroredStrategy)
    testing_tf.give_own_collective_keys(strategy)
    strategy.__init__(["/cpu:0", "/cpu:1"])
    if steps_per_run is not None:
        strategy.extended.steps_per_run = steps_per_run
    return strategy
