"""Distributed input as on a TPU: where batches land, and what a TPU refuses to prefetch."""

import pytest
import tensorflow as tf

from conformance_support import device_names_differ
from conformance_support import strategy_on


def _batches(strategy):
    n = strategy.num_replicas_in_sync
    return tf.data.Dataset.range(n * 2, output_type=tf.float32).batch(n)


@device_names_differ
def test_batches_are_prefetched_to_the_replica_devices(tpu_strategy):
    """By default and with fetch_to_device=True, the batches are on the TPU cores: replica k's on its core.

    TF: tpu_strategy_test.py TPUStrategyDataPrefetchTest.test_prefetch_to_device_default
    TF: tpu_strategy_test.py TPUStrategyDataPrefetchTest.test_prefetch_to_device_tpu
    """
    for options in (None, tf.distribute.InputOptions(experimental_fetch_to_device=True)):
        dataset = tpu_strategy.experimental_distribute_dataset(_batches(tpu_strategy), options)
        element = next(iter(dataset))
        devices = [t.device for t in tpu_strategy.experimental_local_results(element)]
        assert devices == list(tpu_strategy.extended.worker_devices)


def test_batches_stay_on_the_host_without_fetch_to_device(tpu_strategy):
    """With fetch_to_device=False, replica 0's batch is on the host's CPU.

    TF: tpu_strategy_test.py TPUStrategyDataPrefetchTest.test_prefetch_to_device_cpu
    """
    options = tf.distribute.InputOptions(experimental_fetch_to_device=False)
    dataset = tpu_strategy.experimental_distribute_dataset(_batches(tpu_strategy), options)
    element = next(iter(dataset))
    first = tpu_strategy.experimental_local_results(element)[0]
    assert tf.DeviceSpec.from_string(first.device).device_type == "CPU"


def _sparse(strategy):
    return tf.data.Dataset.from_tensors(
        tf.sparse.SparseTensor(
            indices=[[0, 0], [0, 1], [1, 0]], values=[1, 2, 3], dense_shape=[2, 2]
        )
    ).repeat().batch(strategy.num_replicas_in_sync)


def _ragged(strategy):
    return tf.data.Dataset.from_tensors(
        tf.RaggedTensor.from_row_splits(values=[1, 2, 3], row_splits=[0, 2, 3])
    ).repeat().batch(strategy.num_replicas_in_sync)


@pytest.mark.parametrize("make", [_sparse, _ragged], ids=["sparse", "ragged"])
def test_sparse_and_ragged_batches_cannot_be_prefetched_to_device(tpu_strategy, make):
    """Sparse or ragged batches fetched to device raise ValueError "TPUStrategy does not support", from a dataset or a function.

    TF: tpu_strategy_test.py TPUStrategyDataPrefetchTest.test_prefetch_to_device_sparse_dataset
    TF: tpu_strategy_test.py TPUStrategyDataPrefetchTest.test_prefetch_to_device_ragged_dataset_fn
    """
    with pytest.raises(ValueError, match="TPUStrategy does not support"):
        iter(tpu_strategy.experimental_distribute_dataset(make(tpu_strategy)))
    with pytest.raises(ValueError, match="TPUStrategy does not support"):
        iter(tpu_strategy.distribute_datasets_from_function(lambda _: make(tpu_strategy)))


def test_input_function_sees_one_pipeline_per_host(tpu_strategy):
    """An input function's context counts one pipeline per host and every replica (one host: 1 pipeline, id 0).

    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_make_input_fn_iterable
    """
    contexts = []

    def dataset_fn(context):
        contexts.append(context)
        return tf.data.Dataset.range(10).batch(1)

    iter(tpu_strategy.distribute_datasets_from_function(dataset_fn))
    seen = [(c.num_input_pipelines, c.input_pipeline_id, c.num_replicas_in_sync) for c in contexts]
    hosts = tpu_strategy.extended.num_hosts
    assert seen == [(hosts, i, tpu_strategy.num_replicas_in_sync) for i in range(hosts)]


REORDER_DATASETS = {
    "experimental_distribute_dataset": lambda strategy: strategy.experimental_distribute_dataset(
        tf.data.Dataset.range(2).batch(2)
    ),
    "distribute_datasets_from_function": lambda strategy: (
        strategy.distribute_datasets_from_function(lambda _: tf.data.Dataset.range(2))
    ),
}


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
@pytest.mark.parametrize("make", sorted(REORDER_DATASETS))
def test_data_reorder_orders_input_by_device_for_a_reversed_assignment(
    tpu_resolver, topology, make
):
    """With `extended._enable_data_reorder`, replicas on cores 1 and 0 get elements 1 and 0 of range(2); without it, 0 and 1.

    TF: tpu_strategy_test.py TPUStrategyTest.test_replica_order_for_experimental_distribute_dataset
    TF: tpu_strategy_test.py TPUStrategyTest.test_replica_order_for_distribute_datasets_from_function
    """
    firsts = {}
    for reorder in (True, False):
        strategy = strategy_on(tpu_resolver, topology, [1, 0])
        strategy.extended._enable_data_reorder = reorder  # pylint: disable=protected-access
        iterator = iter(REORDER_DATASETS[make](strategy))
        element = tf.function(lambda it: next(it))(iterator)
        firsts[reorder] = [t.numpy().tolist() for t in element.values]
    flat = {reorder: tf.nest.flatten(values) for reorder, values in firsts.items()}
    assert flat == {True: [1, 0], False: [0, 1]}
