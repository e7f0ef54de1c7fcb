"""A fake pod's one-trace step: one call per host, each running its host's replicas.

`replicate` traces the replica function once. On one host it calls that trace
once per replica in the step's own function. On a pod that would make a
component function per core, each sent to its host by its own RPC (32 a step on
a v3-32). Here each host gets one function of its own, marked `_noinline`, that
calls the trace for each of its replicas on its cores: the step sends one call
to each host, and each host runs its replicas side by side in its own process,
as a v3-8 runs its eight. Sums run within each host first (a ring over its
cores), then across the hosts among their first replicas (one ring of one
replica a host), then back within each host, as a pod's all-reduce does.

A host's function is instantiated without TensorFlow's graph optimizer: on a
v3-32 it optimised eight copies of the step on each host at the first call
(a training step's first call: 9.8 s with it, 5.7 s without; warm steps 2-3%
more CPU without it).
"""

import tensorflow as tf

from compat_distribute.testing import _tf
from compat_distribute.testing._fake_tpu import pod_reduce

# The function attribute that keeps TensorFlow from inlining a host's function
# into the step's: inlined, its ops would be split by core again.
_NOT_INLINED = {"_noinline": True}


def host_groups(devices):
    """Replica indices by host, in first-seen order; None on one host."""
    groups = pod_reduce.by_host(devices)
    return groups if len(groups) > 1 else None


def call_by_host(devices, call_replica, inputs, side_by_side):
    """Each replica's outputs, `call_replica(r, inputs[r])` run in one call per host.

    `call_replica` adds replica r's call to the current graph; `side_by_side(graph,
    start)` lets the calls added to `graph` since op `start` run side by side
    (see `replicate`). Each host's call runs on its first replica's device; its
    replicas' outputs come back there.
    """
    outputs = [None] * len(devices)
    graph = tf.compat.v1.get_default_graph()
    for replicas in pod_reduce.by_host(devices):

        def host_step(host_inputs, replicas=tuple(replicas)):
            host_graph = tf.compat.v1.get_default_graph()
            start = len(host_graph.get_operations())
            results = [call_replica(r, x) for r, x in zip(replicas, host_inputs)]
            side_by_side(host_graph, start)
            return results

        host_function = tf.function(
            host_step, autograph=False, experimental_attributes=_NOT_INLINED
        )
        start = len(graph.get_operations())
        with tf.device(devices[replicas[0]]), _tf.calls_without_graph_optimizer():
            results = host_function([inputs[r] for r in replicas])
        side_by_side(graph, start)
        for r, result in zip(replicas, results):
            outputs[r] = result
    return outputs


def sum_hosts_first(tensor, replica_id, devices, groups, collective):
    """`tensor` summed over every replica: within each host, across the hosts'
    first replicas, then back within each host.

    `groups`: replica indices by host, all of one size; `collective(tensor,
    device_groups, which)` sums over each group of devices (`which`: this
    replica's group, a tensor, or None for one group).
    """
    host_of, rank_of = [0] * len(devices), [0] * len(devices)
    for host, replicas in enumerate(groups):
        for rank, r in enumerate(replicas):
            host_of[r], rank_of[r] = host, rank
    within = [[devices[r] for r in replicas] for replicas in groups]
    host = tf.gather(tf.constant(host_of, tf.int32), replica_id)
    first = tf.equal(tf.gather(tf.constant(rank_of, tf.int32), replica_id), 0)
    several = len(groups[0]) > 1
    if several:
        tensor = collective(tensor, within, host)
    across = [[devices[replicas[0]] for replicas in groups]]
    tensor = tf.cond(first, lambda: collective(tensor, across, None), lambda: tensor)
    if several:
        # The first replica's total, to the others of its host.
        tensor = collective(tf.where(first, tensor, tf.zeros_like(tensor)), within, host)
    return tensor


