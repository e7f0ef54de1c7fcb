"""Distributed input with no tf.data autotuning thread to join.

A tf.data iterator whose dataset autotunes runs an optimisation thread, and
destroying the iterator joins it. On TensorFlow 2.21 that thread often sleeps
out its optimisation period (10 ms doubling up to 60 s) instead of waking when
the iterator cancels it, so the destroying thread blocks for as long. A
distributed dataset has many such iterators: the source pipeline of each input
worker, and one prefetching pipeline per replica device built by
`MultiDeviceIterator`. Their waits add up, one after the other, when a TF1
`Session` closes, Keras `fit` returns, an epoch's iterator goes out of scope or
the process exits: 30-130 s after 10 s of feeding 8 replicas, on a loaded box.

So the strategies distribute datasets with `tf.data.Options().autotune.enabled
= False`, unless the program set `autotune.enabled` itself, and every
per-device pipeline runs without autotuning (it has nothing to tune: a
generator and a fixed-size prefetch). Values and their order do not change;
`num_parallel_calls=tf.data.AUTOTUNE` then runs at tf.data's default
parallelism (the schedulable cores, at most 16) and `prefetch(AUTOTUNE)`
keeps its own buffer tuning.
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
