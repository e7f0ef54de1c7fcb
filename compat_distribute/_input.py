"""Distributed input with no tf.data autotuning thread to join.

Destroying an autotuned iterator can block for up to a minute on TensorFlow 2.21,
and a distributed dataset has one per input host and replica device.
"""

import functools
import warnings

from compat_distribute import _patching
from compat_distribute import _tf


def _autotune_off():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def without_autotune(dataset):
    """`dataset` with tf.data autotuning off, unless its options already say.

    Anything but a dataset comes back as it is, for TensorFlow to refuse.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if not isinstance(dataset, tf.data.Dataset):
        return dataset
    with warnings.catch_warnings():  # options() of a graph dataset warns that it may be stale
        warnings.simplefilter("ignore")
        chosen = dataset.options().autotune.enabled
    if chosen is not None:
        return dataset
    return dataset.with_options(_autotune_off())


def _quiet_device_dataset(create):
    @functools.wraps(create)
    def create_device_dataset(*args, **kwargs):
        return create(*args, **kwargs).with_options(_autotune_off())

    return create_device_dataset


_QUIET_PIPELINES = []  # the one started patch, kept for the process


def quiet_device_pipelines():
    """Builds every `MultiDeviceIterator`'s per-device pipelines without autotuning.

    Process-wide and kept: those pipelines have no tunable parameter, so this
    takes away only the thread. Idempotent; patched through `_patching`.
    """
    if _QUIET_PIPELINES:
        return
    module = _tf.multi_device_iterator_ops
    create = _patching.original(module, "_create_device_dataset")
    _QUIET_PIPELINES.append(
        _patching.Patch([(module, "_create_device_dataset", _quiet_device_dataset(create))]).start()
    )


def _dataset_fn_without_autotune(dataset_fn):
    @functools.wraps(dataset_fn)
    def quiet_dataset_fn(*args, **kwargs):
        return without_autotune(dataset_fn(*args, **kwargs))

    return quiet_dataset_fn


class QuietInputMixin:
    """For a strategy's extended: its distributed datasets and V1 input iterators
    run with no autotuning thread (see the module docstring)."""

    def _experimental_distribute_dataset(self, dataset, options):
        quiet_device_pipelines()
        return super()._experimental_distribute_dataset(without_autotune(dataset), options)

    def _distribute_datasets_from_function(self, dataset_fn, options):
        quiet_device_pipelines()
        return super()._distribute_datasets_from_function(
            _dataset_fn_without_autotune(dataset_fn), options
        )

    def _make_dataset_iterator(self, dataset):
        quiet_device_pipelines()
        return super()._make_dataset_iterator(without_autotune(dataset))

    def _make_input_fn_iterator(self, input_fn, *args, **kwargs):
        quiet_device_pipelines()
        return super()._make_input_fn_iterator(
            _dataset_fn_without_autotune(input_fn), *args, **kwargs
        )
