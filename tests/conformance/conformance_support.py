"""What the conformance tests share: the by-design mark, and TPU set-up helpers."""

import tensorflow as tf


def by_design(reason):
    """Marks a behaviour the fake does not copy, with the reason a TPU user would accept.

    The test still runs: on a real TPU it checks the TPU's behaviour, on the fake
    the fake's documented one. The README's conformance table lists the reason.
    """

    def mark(test):
        test.by_design = reason
        return test

    return mark


def device_names_differ(test):
    """Marks a passing row whose restatement leaves out TF's `device:TPU:k` names.

    TF's test names TPU devices; the fake's cores are CPU devices, so the test
    compares devices by index or against `worker_devices` instead.
    """
    return test


def strict_mode_only(test):
    """Marks a row that passes on the fake only in strict mode (`strict=True`), which it turns on."""
    return test


def core_coordinates(topology, core):
    """The (x, y, z, core) of task 0's `core`-th device, for a DeviceAssignment's core_assignment."""
    return topology.device_coordinates[0][core].tolist()


def strategy_on(resolver, topology, cores, packed=True):
    """`tf.distribute.TPUStrategy` with one replica on each of `cores` (task-0 device indices)."""
    assignment = tf.tpu.experimental.DeviceAssignment(
        topology, core_assignment=[[core_coordinates(topology, c)] for c in cores]
    )
    strategy = tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)
    strategy._enable_packed_variable_in_eager_mode = packed  # pylint: disable=protected-access
    return strategy


def local(strategy, value):
    """Per-replica results as Python lists."""
    return [tf.nest.map_structure(lambda t: t.numpy().tolist(), v)
            for v in strategy.experimental_local_results(value)]


def fed_element(strategy, step, replica):
    """The element of `Dataset.range(m).batch(num_replicas_in_sync)` that `replica`
    takes at `step` of a distributed dataset (its batch is one element).

    One host: step * n + replica. On a pod TensorFlow shards the dataset across
    the hosts' pipelines by element (AUTO falls back to DATA): after splitting
    each global batch into one-element batches, host h's pipeline takes every
    num_hosts-th of them from the h-th, so host h's k-th replica takes
    (step * replicas_per_host + k) * num_hosts + h.
    TF: input_lib_test.py DistributedIteratorTest.testUnevenDatasetBatchesMultiWorkerFourReplicas
    """
    hosts = strategy.extended.num_hosts
    per_host = strategy.num_replicas_in_sync // hosts
    host, k = divmod(replica, per_host)
    return (step * per_host + k) * hosts + host


def tf1_tpu_session(resolver):
    """A TF1 session as TPU programs open one: to the TPU's master, its config
    carrying the TPU's cluster (a pod's hosts) where it has one."""
    config = tf.compat.v1.ConfigProto()
    cluster_spec = resolver.cluster_spec()
    if cluster_spec:
        config.cluster_def.CopyFrom(cluster_spec.as_cluster_def())
    return tf.compat.v1.Session(target=resolver.master(), config=config)
