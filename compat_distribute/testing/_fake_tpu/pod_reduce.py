"""`HostFirstReduction`: a fake pod's all-reduce, within each host before across hosts.

A few transfers a host per step, instead of two a core per tensor.
"""

import collections

import tensorflow as tf

from compat_distribute.testing import _tf


def _host_of(device):
    """The host part of a device name: "/job:worker/replica:0/task:2"."""
    spec = tf.DeviceSpec.from_string(device)
    return (spec.job, spec.replica, spec.task)


def by_host(devices):
    """Indices into `devices`, grouped by host in first-seen order: [[i, ...], ...].

    By index, not name: a traced value's device may be "" (placed later), and
    several values may name the same device.
    """
    groups = collections.OrderedDict()
    for i, device in enumerate(devices):
        groups.setdefault(_host_of(device), []).append(i)
    return list(groups.values())


def _is_dense(value):
    return isinstance(value, tf.distribute.DistributedValues) and all(
        isinstance(v, tf.Tensor) for v in value.values
    )


class HostFirstReduction(tf.distribute.ReductionToOneDevice):
    """Reduces within each host first, then across hosts; broadcasts back the same way.

    The sum is formed on the first core of the first host, as
    `ReductionToOneDevice` forms it on the first destination device.
    """

    def reduce_implementation(self, reduce_op, per_replica_value, destinations, options):
        return self.batch_reduce_implementation(
            reduce_op, [(per_replica_value, destinations)], options
        )[0]

    def batch_reduce_implementation(self, reduce_op, value_destination_pairs, options):
        results = [None] * len(value_destination_pairs)
        batches = collections.OrderedDict()  # (dtype, sources, destinations) -> [index]
        for i, (value, destinations) in enumerate(value_destination_pairs):
            if not _is_dense(value):
                results[i] = super().reduce_implementation(reduce_op, value, destinations, options)
                continue
            sources = tuple(v.device for v in value.values)
            targets = tuple(self._destination_devices(value, destinations))
            batches.setdefault((value.values[0].dtype, sources, targets), []).append(i)
        for (_, sources, targets), indices in batches.items():
            values = [value_destination_pairs[i][0] for i in indices]
            for i, reduced in zip(indices, self._reduce_packed(reduce_op, values, sources, targets)):
                results[i] = reduced
        return results

    def broadcast_implementation(self, tensor, destinations):
        devices = _tf.get_devices_from(destinations, self._canonicalize_devices)
        if len(devices) == 1:
            return super().broadcast_implementation(tensor, destinations)
        return _tf.regroup(self._fan_out(tensor, devices), wrap_class=_tf.Mirrored)

    def _destination_devices(self, value, destinations):
        if _tf.check_destinations(destinations):
            return _tf.get_devices_from(destinations, self._canonicalize_devices)
        return _tf.get_devices_from(value, self._canonicalize_devices)

    def _reduce_packed(self, reduce_op, values, sources, targets):
        """Reduces `values` (PerReplica of one dtype on `sources`) as one flat tensor."""
        shapes = [v.values[0].shape for v in values]
        if any(not s.is_fully_defined() for s in shapes):
            if len(values) > 1:  # Shapes known only at run time: one value at a time.
                return [self._reduce_packed(reduce_op, [v], sources, targets)[0] for v in values]
            shapes = None
        flats = []
        for r, device in enumerate(sources):
            with tf.device(device):
                parts = [tf.reshape(v.values[r], [-1]) for v in values]
                flats.append(parts[0] if len(parts) == 1 else tf.concat(parts, 0))
        host_sums = []
        for host in by_host(sources):
            with tf.device(sources[host[0]]):
                host_sums.append(tf.add_n([flats[i] for i in host]))
        with tf.device(self.reduce_to_device or sources[0]):
            total = tf.add_n(host_sums)
            if reduce_op == tf.distribute.ReduceOp.MEAN:
                total = total / len(sources)  # As TF's ReductionToOneDevice divides.
            elif reduce_op != tf.distribute.ReduceOp.SUM:
                raise ValueError("`reduce_op` must be Reduce.SUM or Reduce.MEAN.")
        copies = self._fan_out(total, targets)
        if shapes is None:
            shape = tf.shape(values[0].values[0])
            shaped = []
            for device, copy in zip(targets, copies):
                with tf.device(device):
                    shaped.append(tf.reshape(copy, shape))
            return [_tf.regroup(shaped, wrap_class=_tf.Mirrored)]
        sizes = [s.num_elements() for s in shapes]
        per_value = [[] for _ in values]
        for device, copy in zip(targets, copies):
            with tf.device(device):
                pieces = tf.split(copy, sizes) if len(values) > 1 else [copy]
                for k, (piece, shape) in enumerate(zip(pieces, shapes)):
                    per_value[k].append(tf.reshape(piece, shape))
        return [_tf.regroup(copies_of_one, wrap_class=_tf.Mirrored) for copies_of_one in per_value]

    @staticmethod
    def _fan_out(tensor, devices):
        """Copies of `tensor` on `devices`: one per host crosses over, then local copies."""
        copies = [None] * len(devices)
        for host in by_host(devices):
            with tf.device(devices[host[0]]):
                on_host = tf.identity(tensor)
            copies[host[0]] = on_host
            for i in host[1:]:
                with tf.device(devices[i]):
                    copies[i] = tf.identity(on_host)
        return copies
