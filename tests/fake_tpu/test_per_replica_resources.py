"""Per-replica resources reaching a step: every replica uses its own, never replica 0's.

A resource per replica (a lookup table, an iterator) made with
`experimental_distribute_values_from_function` and passed to `run` cannot be an
input of the one trace (only tensors are), so the fake traces that step once per
replica, with its RuntimeWarning, and each replica reads its own resource. A
resource the step captures is one object, the same in every replica, as in the
one program a TPU runs on every core.
"""

import warnings

import pytest
import tensorflow as tf

from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import FakeTPUStrategy

REPLICAS = 4


@pytest.fixture(name="strategy", scope="module")
def strategy_fixture():
    return FakeTPUStrategy(FakeTPUClusterResolver(mesh_shape=(1, 2, 1, 2)))


def _table_per_replica(strategy):
    def table(context):
        r = context.replica_id_in_sync_group
        with tf.device(strategy.extended.worker_devices[r]):
            init = tf.lookup.KeyValueTensorInitializer([0, 1], [10 * (r + 1), 100 * (r + 1)])
            return tf.lookup.StaticHashTable(init, default_value=-1)

    return strategy.experimental_distribute_values_from_function(table)


def _iterator_per_replica(strategy):
    def iterator(context):
        r = context.replica_id_in_sync_group
        with tf.device(strategy.extended.worker_devices[r]):
            return iter(tf.data.Dataset.range(1000 * r, 1000 * r + 5))

    return strategy.experimental_distribute_values_from_function(iterator)


def _run(strategy, fn, *, args=(), kwargs=None):
    @tf.function
    def step():
        return strategy.experimental_local_results(strategy.run(fn, args=args, kwargs=kwargs))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = [t.numpy().tolist() for t in step()]
    return outputs, [str(w.message) for w in caught if w.category is RuntimeWarning]


def test_each_replica_looks_up_in_its_own_table(strategy):
    outputs, warned = _run(strategy, lambda t: t.lookup(tf.constant([1, 0])), args=(_table_per_replica(strategy),))
    assert outputs == [[100 * (r + 1), 10 * (r + 1)] for r in range(REPLICAS)]
    assert warned == [
        "The fake TPU traces this step once per replica (the replicas' inputs hold a "
        "StaticHashTable that differs by replica); trace mode 'once' does not apply there."
    ]


def test_each_replica_reads_its_own_iterator_step_after_step(strategy):
    iterators = _iterator_per_replica(strategy)

    @tf.function
    def step():
        return strategy.experimental_local_results(strategy.run(lambda it: next(it), args=(iterators,)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        firsts, seconds = ([t.numpy() for t in step()] for _ in range(2))
    assert firsts == [1000 * r for r in range(REPLICAS)]
    assert seconds == [1000 * r + 1 for r in range(REPLICAS)]


def test_a_per_replica_table_in_kwargs_beside_tensors_is_the_replica_own(strategy):
    keys = strategy.experimental_distribute_values_from_function(lambda context: tf.constant([0, 1]))

    def lookup(keys, tables):
        return tables["table"].lookup(keys)

    outputs, _ = _run(strategy, lookup, args=(keys,), kwargs={"tables": {"table": _table_per_replica(strategy)}})
    assert outputs == [[10 * (r + 1), 100 * (r + 1)] for r in range(REPLICAS)]


def test_a_table_shared_by_the_replicas_keeps_one_trace(strategy):
    shared = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer([0, 1], [7, 8]), -1)
    traced = []

    def lookup(x):
        traced.append(None)
        return shared.lookup(x)

    values = strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant([context.replica_id_in_sync_group % 2])
    )
    outputs, warned = _run(strategy, lookup, args=(values,))
    assert outputs == [[7], [8], [7], [8]]
    assert (len(traced), warned) == (1, [])
