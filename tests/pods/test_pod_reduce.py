"""The fake pod's all-reduce: within each host first, one value per host across hosts."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from compat_distribute.testing import _tf
from compat_distribute.testing._fake_tpu.pod_reduce import HostFirstReduction

HOSTS, CORES = 2, 4
POD_DEVICES = [
    f"/job:worker/replica:0/task:{h}/device:CPU:{c}" for h in range(HOSTS) for c in range(CORES)
]


def _traced_reduction(shapes, reduce_op="SUM"):
    """Traces a batch all-reduce over POD_DEVICES (never run: the hosts need not exist);
    returns {op type: Counter of the tasks its ops are placed on}."""

    @tf.function
    def step():
        values = []
        for k, shape in enumerate(shapes):
            components = []
            for device in POD_DEVICES:
                with tf.device(device):
                    components.append(tf.fill(shape, float(k)))
            values.append(_tf.PerReplica(tuple(components)))
        reduced = HostFirstReduction().batch_reduce_implementation(
            tf.distribute.ReduceOp(reduce_op), [(v, v) for v in values], None
        )
        return [r.values for r in reduced]

    graph = step.get_concrete_function().graph
    placed = collections.defaultdict(collections.Counter)
    for op in graph.get_operations():
        placed[op.type][tf.DeviceSpec.from_string(op.device).task] += 1
    return placed


def test_each_host_sums_its_own_cores_then_one_sum_crosses_hosts():
    placed = _traced_reduction([[3, 2], [5], [2, 2]])
    # Packed: one AddN per host over its 4 cores, one across the 2 hosts (on host 0).
    assert placed["AddN"] == {0: 2, 1: 1}
    # Three gradients packed into one flat tensor on each core before the sums.
    assert placed["ConcatV2"] == {0: CORES, 1: CORES}
    # Back: one copy per host, then one per core of that host, each split to shapes.
    assert placed["SplitV"] == {0: CORES, 1: CORES}


def test_reduction_values_match_reduction_to_one_device(strategy_devices):
    """On one host's 8 cores: SUM and MEAN of a packed batch equal TF's own."""
    devices = strategy_devices
    strategies = [
        tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)
        for ops in (HostFirstReduction(), tf.distribute.ReductionToOneDevice())
    ]
    results = []
    for strategy in strategies:

        @tf.function
        def step():
            def replica():
                i = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
                grads = [tf.fill([2, 3], i), tf.fill([4], 10.0 * i), tf.reshape(i + 1.0, [])]
                ctx = tf.distribute.get_replica_context()
                return ctx.all_reduce("SUM", grads), ctx.all_reduce("MEAN", grads)

            return strategy.run(replica)

        sums, means = step()
        results.append(
            [
                [c.numpy() for c in strategy.experimental_local_results(v)]
                for v in tf.nest.flatten((sums, means))
            ]
        )
    mine, theirs = results
    for a, b in zip(mine, theirs):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y)
    n = len(devices)
    np.testing.assert_allclose(mine[0][0], np.full([2, 3], n * (n - 1) / 2))
    np.testing.assert_allclose(mine[5][3], (n + 1) / 2)


@pytest.fixture(name="strategy_devices")
def _strategy_devices():
    cpus = tf.config.list_logical_devices("CPU")
    if len(cpus) < 8:
        pytest.fail(f"needs 8 virtual CPUs (the plugin's tf_devices = 8); got {len(cpus)}")
    return [d.name for d in cpus[:8]]


def test_values_whose_device_is_not_yet_placed_are_each_counted(strategy_devices):
    """A sync-on-read variable's traced reads carry no device name: each replica's
    value still counts once (grouping goes by position, not by device name)."""
    strategy = tf.distribute.MirroredStrategy(strategy_devices, cross_device_ops=HostFirstReduction())
    with strategy.scope():
        w = tf.Variable(
            0.0,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
    ids = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group))
    )

    @tf.function
    def step(x):
        def write(x):
            w.assign(x + w)
            return w

        def all_reduce(x):
            return tf.distribute.get_replica_context().all_reduce("SUM", w) + x

        return strategy.run(all_reduce, args=(strategy.run(write, args=(x,)),))

    n = len(strategy_devices)
    total = n * (n - 1) / 2
    assert [float(v) for v in strategy.experimental_local_results(step(ids))] == [
        total + k for k in range(n)
    ]
