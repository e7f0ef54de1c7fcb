"""Distributed variables that read as TPU variables do.

MirroredStrategy's variables pick a replica's copy by replica index, assert
that they are read under their own strategy, and (packed, as TPUStrategyV2
packs them by default) hand operators a `PackedVarAndDevice`. A TPU variable
picks the copy on the replica's DEVICE (a strategy on cores (1, 0) reads a
variable of the all-core strategy core by core), reads under any TPU strategy of
the slice, and gives operators a read tensor. `adopt` turns a variable the
fake's strategy created into these classes.
"""

import tensorflow as tf

from compat_distribute.testing import _tf

# pylint: disable=protected-access


def _foreign_replica_device(variable):
    """The device of the current replica when another fake strategy is running it, else None."""
    context = tf.distribute.get_replica_context()
    if context is None or context.strategy is variable._distribute_strategy:
        return None
    worker_devices = getattr(context.strategy.extended, "_fake_tpu_worker_devices", None)
    if worker_devices is None:
        return None  # Not a fake TPU's replica: TensorFlow's own rules apply.
    replica_id = _tf.current_replica_id()
    return worker_devices()[replica_id], replica_id


class _FakeTPUVariableMixin:
    """The TPU's read rules on top of a MirroredStrategy variable."""

    def _get_replica(self, replica_id):
        foreign = _foreign_replica_device(self)
        if foreign is None:
            return super()._get_replica(replica_id)
        device, replica = foreign
        canonical = _tf.canonicalize_device(device)
        for index, value in enumerate(self._values):
            if _tf.canonicalize_device(value.device) == canonical:
                return super()._get_replica(index)
        # TF's words (tpu_replication.get_replicated_var_handle).
        raise ValueError(
            f"Failed to find a variable on any device in replica {replica} for "
            f"current device assignment"
        )

    def _get_as_operand(self):
        # As TPUVariableMixin: operators get a read tensor, never a packed handle.
        return self.read_value()

    def read_value(self):
        if _foreign_replica_device(self) is None:
            return super().read_value()
        return tf.identity(self._get())

    def _dense_var_to_tensor(self, dtype=None, name=None, as_ref=False):
        if _foreign_replica_device(self) is None:
            return super()._dense_var_to_tensor(dtype=dtype, name=name, as_ref=as_ref)
        return tf.convert_to_tensor(self._get(), dtype=dtype, name=name)


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
