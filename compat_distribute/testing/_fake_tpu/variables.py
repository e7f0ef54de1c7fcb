"""Distributed variables that read as TPU variables do.

By the replica's device, under any TPU strategy of the slice (`adopt`).
"""


import tensorflow as tf

from compat_distribute.testing import _tf

# pylint: disable=protected-access


def _replica_cores():
    """The logical cores' devices of the fake TPU replica running now, or None outside one."""
    context = tf.distribute.get_replica_context()
    if context is None:
        return None
    replica_cores = getattr(context.strategy.extended, "_fake_tpu_replica_cores", None)
    if replica_cores is None:
        return None  # Not a fake TPU's replica: TensorFlow's own rules apply.
    return replica_cores(_tf.current_replica_id())


class _FakeTPUVariableMixin:
    """The TPU's read rules on top of a MirroredStrategy variable."""

    def _index_on(self, cores):
        """The copy on the replica's first logical core that has one, as a TPU
        picks it (TF's tpu_replication.get_replicated_var_handle): a variable
        made in `experimental_logical_device(k)` is read from core k."""
        # Every read asks, so the answers are kept: a copy's device never
        # changes, and canonical names differ only inside and outside graphs.
        in_graph = not tf.compat.v1.executing_eagerly_outside_functions()
        cache = self.__dict__.setdefault("_fake_tpu_index_cache", {})
        key = (tuple(cores), in_graph)
        if key not in cache:
            if in_graph not in cache:
                cache[in_graph] = {_tf.canonicalize_device(v.device): i for i, v in enumerate(self._values)}
            found = (cache[in_graph].get(_tf.canonicalize_device(d)) for d in cores)
            cache[key] = next((i for i in found if i is not None), None)
        if cache[key] is not None:
            return cache[key]
        # TF's words.
        raise ValueError(
            f"Failed to find a variable on any device in replica "
            f"{_tf.current_replica_id()} for current device assignment"
        )

    def _tpu_rules_apply(self):
        """The device of the replica's copy when the TPU's read rules differ from
        MirroredStrategy's: a foreign strategy's replica, a packed variable, a
        replica whose logical core 0 has no copy."""
        cores = _replica_cores()
        if cores is None:
            return None
        index = self._index_on(cores)  # raises where the replica has no copy
        foreign = tf.distribute.get_replica_context().strategy is not self._distribute_strategy
        if foreign or self._use_packed_variable() or index != _tf.current_replica_id():
            return self._values[index].device
        return None

    def _use_packed_variable(self):
        # Packed in eager mode only, as TPUStrategyV2 names it: inside a
        # function every read and write goes through the copies' own handles.
        # A packed handle is another graph input than a copy's, so a read of
        # one would not wait for a write of the other (MirroredStrategy's
        # updates write the copies); XLA on the CPU cannot compile it either.
        return super()._use_packed_variable() and not tf.inside_function()

    def _get_replica(self, replica_id):
        cores = _replica_cores()
        if cores is not None:
            replica_id = self._index_on(cores)
        return super()._get_replica(replica_id)

    @property
    def handle(self):
        device = self._tpu_rules_apply()
        if device is None:
            if _replica_cores() is None and self._use_packed_variable():
                # Cross-replica, as TPUVariableMixin: the copy's own handle on
                # this device (or the first replica's), not the packed one.
                return self._get_on_device_or_primary().on_device_handle()
            return super().handle
        copy = self._values[self._index_on((device,))]
        if not self._use_packed_variable():
            return copy.handle
        return self._packed_var.handle

    def _read_on_replica(self, device):
        if self.trainable:
            _tf.variable_accessed(self)
        with tf.device(device):
            return tf.raw_ops.ReadVariableOp(resource=self.handle, dtype=self.dtype)

    def _get_as_operand(self):
        # As TPUVariableMixin: operators get a read tensor, never a packed handle.
        return self.read_value()

    def read_value(self):
        device = self._tpu_rules_apply()
        if device is None:
            return super().read_value()
        return self._read_on_replica(device)

    def value(self):
        device = self._tpu_rules_apply()
        if device is None:
            return super().value()
        return self._read_on_replica(device)

    def _dense_var_to_tensor(self, dtype=None, name=None, as_ref=False):
        device = self._tpu_rules_apply()
        if device is None:
            return super()._dense_var_to_tensor(dtype=dtype, name=name, as_ref=as_ref)
        if as_ref:
            return self.handle
        value = self._read_on_replica(device)
        if dtype is not None and dtype != self.dtype:
            return tf.cast(value, dtype, name=name)
        return value


def _classes():
    mirrored = type("FakeTPUMirroredVariable", (_FakeTPUVariableMixin, _tf.MirroredVariable), {})
    sync_on_read = type(
        "FakeTPUSyncOnReadVariable", (_FakeTPUVariableMixin, _tf.SyncOnReadVariable), {}
    )
    return {_tf.MirroredVariable: mirrored, _tf.SyncOnReadVariable: sync_on_read}


_ADOPTED = _classes()


def adopt(variable):
    """Gives `variable` (made by MirroredExtended) the TPU's read rules; returns it.

    The classes add methods only, no state, so the instance keeps everything
    MirroredStrategy built (copies, packed handle, saveables).
    """
    cls = _ADOPTED.get(type(variable))
    if cls is not None:
        variable.__class__ = cls
    return variable
