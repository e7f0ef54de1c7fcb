"""Collective ops of the fake TPU's one trace: sums and gathers over the replicas.

Each is built inside the trace of one replica (see `replicate.py`), with this
replica's id a tensor of the trace; the collectives are keyed by the
strategy's own key allocator, so strategies over other devices never meet.
"""

import functools

import tensorflow as tf

from compat_distribute.testing import _tf
from compat_distribute.testing._fake_tpu import pod_replicate

# From this many replicas on, a sum is two rings; below, the second costs more than it
# saves (CPU a training step, v3-8: 7.5 against 6.6 ms; 32 replicas: 41 against 47).
TWO_STAGE_MIN_REPLICAS = 16


def _collective(extended, tensor, groups, which):
    """One CollectiveReduceV2 sum over each of `groups` (lists of canonical devices,
    equal sizes); `which` is the index of this replica's group, a tensor."""
    keys = _tf.collective_keys(extended)
    group_keys, instance_keys = [], []
    for devices in groups:
        group_keys.append(keys.get_group_key(devices))
        instances = {keys.get_instance_key(group_keys[-1], d) for d in devices}
        if len(instances) != 1:
            raise RuntimeError(
                f"The fake TPU's collective instance keys differ between its devices "
                f"({sorted(instances)}): a collective ran on some replicas only."
            )
        instance_keys.append(instances.pop())
    if len(groups) == 1:
        group_key, instance_key = group_keys[0], instance_keys[0]
    else:
        group_key = tf.gather(tf.constant(group_keys, tf.int32), which)
        instance_key = tf.gather(tf.constant(instance_keys, tf.int32), which)
    return tf.raw_ops.CollectiveReduceV2(
        input=tensor,
        group_size=len(groups[0]),
        group_key=group_key,
        instance_key=instance_key,
        ordering_token=[],
        merge_op="Add",
        final_op="Id",
        communication_hint="ring",
    )


def _collective_sum(extended, tensor, replica_id):
    """`tensor` summed over every replica.

    A ring over N devices costs each of them 2(N-1) steps in turn. From
    TWO_STAGE_MIN_REPLICAS on: a ring within groups of `a` consecutive replicas
    (`a` the largest divisor of N at most its square root), then one across the
    groups among replicas of equal rank: 2(a-1) + 2(N/a-1) steps, 20 for 62 at 32.
    """
    devices = [_tf.canonicalize_device(d) for d in extended.worker_devices]
    count = len(devices)
    hosts = pod_replicate.host_groups(devices)
    if hosts is not None and len({len(replicas) for replicas in hosts}) == 1:
        return pod_replicate.sum_hosts_first(
            tensor, replica_id, devices, hosts, functools.partial(_collective, extended)
        )
    inner = 1
    if count >= TWO_STAGE_MIN_REPLICAS:
        inner = max(a for a in range(1, int(count**0.5) + 1) if count % a == 0)
    if inner == 1:
        return _collective(extended, tensor, [devices], None)
    groups = [devices[g : g + inner] for g in range(0, count, inner)]
    tensor = _collective(extended, tensor, groups, replica_id // inner)
    ranks = [devices[r::inner] for r in range(inner)]
    return _collective(extended, tensor, ranks, replica_id % inner)


def all_reduce(extended, reduce_op, tensors, replica_id):
    """Each tensor summed (or averaged) over the replicas; one collective per dtype.

    `replica_id`: this replica's id, a tensor of the trace.
    """
    count = len(extended.worker_devices)
    if count == 1:  # No collective, as MirroredStrategy on one device: XLA compiles the step whole.
        return list(tensors)
    by_dtype = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    results = [None] * len(tensors)
    for dtype, indices in by_dtype.items():
        wide = dtype == tf.bool
        parts = [tf.reshape(tf.cast(tensors[i], tf.int32) if wide else tensors[i], [-1]) for i in indices]
        packed = parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)
        summed = _collective_sum(extended, packed, replica_id)
        if reduce_op == tf.distribute.ReduceOp.MEAN:
            if dtype.is_floating or dtype.is_complex:
                summed = summed / tf.cast(count, dtype)
            else:
                summed = summed // count
        sizes = [tf.size(tensors[i]) for i in indices]
        pieces = [summed] if len(parts) == 1 else tf.split(summed, sizes)
        for i, piece in zip(indices, pieces):
            piece = tf.reshape(piece, tf.shape(tensors[i]))
            results[i] = tf.cast(piece, tf.bool) if wide else piece
    return results


def all_gather(extended, tensor, axis, replica_id):
    """`tensor` of every replica, in replica order, concatenated along `axis`.

    Summed into this replica's slot of a stack (TPUs need equal shapes on
    every replica too), so the order is the replicas' whatever the group's
    device ranks are.
    """
    count = len(extended.worker_devices)
    if count == 1:
        return tensor
    slot = tf.one_hot(replica_id, count, dtype=tensor.dtype)
    stacked = tf.reshape(slot, [count] + [1] * tensor.shape.rank) * tensor[tf.newaxis]
    stacked = _collective_sum(extended, stacked, replica_id)
    return tf.concat(tf.unstack(stacked, num=count), axis=axis)
