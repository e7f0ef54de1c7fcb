"""What the Keras test modules share: stock MirroredStrategies of their own, and the
fake TPU without the fix it starts for itself."""

import contextlib

import pytest
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


@contextlib.contextmanager
def fails_without_the_fakes_own_fix(strategy):
    """Runs the body with the fix fake `strategy` started for itself stopped; the body
    must fail as keras-team/keras#19246 fails. The fix is started again after."""
    from compat_distribute import keras as cd_keras
    from compat_distribute.testing import _fake_tpu

    own_fix = _fake_tpu.keras_tpu.multi_step_fix_of(strategy)
    own_fix.stop()
    try:
        assert not cd_keras.multi_step_fix_started(strategy)
        with pytest.raises(
            tf.errors.InvalidArgumentError, match="You must feed a value for placeholder tensor"
        ):
            yield
    finally:
        own_fix.start()
