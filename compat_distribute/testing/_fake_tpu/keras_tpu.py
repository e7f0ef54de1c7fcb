"""Keras on the fake TPU: both Kerases take it for a TPU where that changes what they
report, and Keras 3 needs no opt-in for its multi-step fix (docs/design.md says how).
"""

import sys
import weakref

import tensorflow as tf

from compat_distribute import _patching
from compat_distribute import keras as cd_keras
from compat_distribute.testing._fake_tpu import extended as extended_lib


def is_fake_tpu(strategy):
    return isinstance(getattr(strategy, "extended", None), extended_lib.FakeTPUExtended)


def _keras_2_check(original):
    """Keras 2's `is_tpu_strategy`: per-batch logs of the first replica, sync-on-write
    metrics, and on pods the predictions reordered as a TPU pod's."""

    def is_tpu_strategy(strategy):
        # In a TF1 graph the fake runs MirroredStrategy's per-replica graph loop
        # (see replicate.py), which tf-keras' TF1 TPU loop cannot drive.
        if is_fake_tpu(strategy) and tf.compat.v1.executing_eagerly_outside_functions():
            return True
        return original(strategy)

    return is_tpu_strategy


def _keras_3_check(original):
    """Keras 3's `_is_tpu_strategy`: on pods, the predictions reordered as a TPU pod's."""

    def _is_tpu_strategy(strategy):
        return is_fake_tpu(strategy) or original(strategy)

    return _is_tpu_strategy


def _keras_3_reduction(original):
    """Keras 3's `reduce_per_replica`: "auto" is "first" on a TPU, whichever name
    built it (`isinstance(strategy, tf.distribute.TPUStrategy)` there)."""

    def reduce_per_replica(values, strategy, reduction):
        if reduction == "auto" and is_fake_tpu(strategy):
            reduction = "first"
        return original(values, strategy, reduction)

    return reduce_per_replica


# (module, function, its wrapper). A module not imported yet is patched by a
# later `recognise()`; a Keras without the function (Keras 3's keras.src.backend)
# has no such check.
TPU_CHECKS = (
    ("tf_keras.src.backend", "is_tpu_strategy", _keras_2_check),
    ("keras.src.backend", "is_tpu_strategy", _keras_2_check),  # Keras 2.13-2.15
    ("keras.src.backend.tensorflow.trainer", "_is_tpu_strategy", _keras_3_check),
    ("keras.src.backend.tensorflow.trainer", "reduce_per_replica", _keras_3_reduction),
)

_started = {}  # (module name, function) -> its started Patch


def recognise():
    """Makes each Keras imported so far take a fake TPU strategy for a TPU.

    Called when a fake strategy is built and whenever its scope is entered, so
    a Keras imported after the strategy was built is patched before it builds
    a model in that scope.
    """
    for module_name, name, wrapper in TPU_CHECKS:
        module = sys.modules.get(module_name)
        if (module_name, name) in _started or not callable(getattr(module, name, None)):
            continue
        patched = wrapper(_patching.original(module, name))
        _started[module_name, name] = _patching.Patch([(module, name, patched)]).start()


_fixes = weakref.WeakKeyDictionary()  # fake strategy -> its started MultiStepFix


def attach(strategy):
    """Keras as on a TPU for the new fake `strategy`, for as long as it lives."""
    recognise()
    fix = _fixes[strategy] = cd_keras.multi_step_fix(strategy).start()
    weakref.finalize(strategy, fix.stop)


def multi_step_fix_of(strategy):
    """The `MultiStepFix` that fake `strategy` started for itself."""
    return _fixes[strategy]
