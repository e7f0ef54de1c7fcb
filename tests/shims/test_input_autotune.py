"""Distributed input runs without tf.data autotuning, values unchanged.

How long teardown takes is measured in tests/fake_tpu/test_fake_tpu_input_exit.py;
here, what the strategies hand to TensorFlow.
"""

import pytest
import tensorflow as tf

from compat_distribute import _input
from compat_distribute import _tf
from compat_distribute import multi_worker
from compat_distribute import tpu
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import FakeTPUStrategy
from compat_distribute.testing._fake_tpu import extended as fake_extended


def _autotune(dataset):
    return dataset.options().autotune.enabled


@pytest.fixture(name="v3_8", scope="module")
def v3_8_fixture():
    return FakeTPUStrategy(FakeTPUClusterResolver("v3-8"))


def test_a_dataset_gets_autotuning_off_and_the_same_values():
    dataset = tf.data.Dataset.range(10).map(lambda x: x * x, num_parallel_calls=tf.data.AUTOTUNE)
    quiet = _input.without_autotune(dataset)
    assert (_autotune(dataset), _autotune(quiet)) == (None, False)
    assert list(quiet.as_numpy_iterator()) == [x * x for x in range(10)]


@pytest.mark.parametrize("chosen", [True, False])
def test_the_program_s_own_autotune_choice_is_kept(chosen):
    options = tf.data.Options()
    options.autotune.enabled = chosen
    dataset = tf.data.Dataset.range(3).with_options(options)
    assert _input.without_autotune(dataset) is dataset


def test_what_is_not_a_dataset_comes_back_for_tensorflow_to_refuse():
    not_a_dataset = [1, 2, 3]
    assert _input.without_autotune(not_a_dataset) is not_a_dataset


def test_device_pipelines_are_wrapped_once_through_the_patch_registry():
    from compat_distribute import _patching

    module = _tf.multi_device_iterator_ops
    _input.quiet_device_pipelines()
    wrapped = module._create_device_dataset
    _input.quiet_device_pipelines()
    assert module._create_device_dataset is wrapped
    assert _patching.values(module, "_create_device_dataset") == (wrapped,)
    assert wrapped.__wrapped__ is _patching.original(module, "_create_device_dataset")


@pytest.mark.parametrize(
    "extended",
    [fake_extended.FakeTPUExtended, tpu._TPUExtended, multi_worker._CollectiveExtended],
    ids=["fake TPU", "TPU shim", "multi-worker shim"],
)
def test_every_strategy_distributes_through_the_mixin(extended):
    mro = extended.__mro__
    assert _input.QuietInputMixin in mro
    assert mro.index(_input.QuietInputMixin) < mro.index(_tf.StrategyExtendedV2)


def _spy_on_distributed_datasets(monkeypatch):
    """The datasets the strategy passes on to TensorFlow's input code."""
    seen = []
    quiet = _input.without_autotune

    def spy(dataset):
        seen.append(quiet(dataset))
        return seen[-1]

    monkeypatch.setattr(_input, "without_autotune", spy)
    return seen


def test_fake_tpu_datasets_reach_tensorflow_without_autotuning(v3_8, monkeypatch):
    seen = _spy_on_distributed_datasets(monkeypatch)
    dataset = tf.data.Dataset.range(16).map(lambda x: x + 100).batch(16)
    values = v3_8.experimental_local_results(next(iter(v3_8.experimental_distribute_dataset(dataset))))
    assert [v.numpy().tolist() for v in values] == [[100 + 2 * r, 101 + 2 * r] for r in range(8)]
    v3_8.make_dataset_iterator(dataset)
    assert [_autotune(d) for d in seen] == [False, False]


def test_fake_tpu_dataset_functions_return_datasets_without_autotuning(v3_8, monkeypatch):
    seen = _spy_on_distributed_datasets(monkeypatch)
    made = []

    def dataset_fn(context):
        dataset = tf.data.Dataset.range(8).batch(context.get_per_replica_batch_size(8))
        made.append(dataset)
        return dataset

    distributed = v3_8.distribute_datasets_from_function(dataset_fn)
    values = v3_8.experimental_local_results(next(iter(distributed)))
    assert [v.numpy().tolist() for v in values] == [[r] for r in range(8)]
    assert seen and all(_autotune(d) is False for d in seen), seen
    assert made and all(_autotune(d) is None for d in made)  # the program's own, untouched
