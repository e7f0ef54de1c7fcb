"""`MultiWorkerMirroredStrategy` with TF1's signature, over TF2's strategy."""

from compat_distribute import _cluster_wait
from compat_distribute import _input
from compat_distribute import _members
from compat_distribute import _steps
from compat_distribute import _tf
from compat_distribute import _tf_config
from compat_distribute import _validate
from compat_distribute import tpu

# TF's own enum object (an alias of CommunicationImplementation), as TF1 exported it.
CollectiveCommunication = _tf.CollectiveCommunication


class _CollectiveExtended(_input.QuietInputMixin, _tf.CollectiveAllReduceExtended):
    """TF2's CollectiveAllReduceExtended with the V1 extended members, and
    distributed input with no autotuning thread to join (see `_input`)."""

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        # Fixes TF's documented all_reduce example (ReplicaContext.all_reduce of
        # experimental_distribute_values_from_function's values, in a
        # tf.function) with one device per worker: "ValueError: destinations
        # can not be empty". With one local replica, mirrored_run's merge_call
        # hands over the replica's value as a plain tensor (regroup unwraps a
        # 1-tuple), and ReplicaContext.all_reduce uses that tensor's `.device`
        # as the destination. In a graph, a tensor made outside strategy.run
        # (value_fn's output, or an argument of run) has no device, so "" reaches
        # cross_device_ops.validate_destinations. That value lives on this
        # worker's only device: reduce to it.
        if len(self.worker_devices) == 1:
            value_destination_pairs = [
                (
                    value,
                    dest if _tf.check_destinations(dest) else self.worker_devices[0],
                )
                for value, dest in value_destination_pairs
            ]
        return super()._batch_reduce_to(reduce_op, value_destination_pairs, options)


_members.serve(_CollectiveExtended, _members.MWMS, _members.EXTENDED)


class MultiWorkerMirroredStrategy(_steps.RunStepsMixin, _tf.CollectiveAllReduceStrategy):
    """`tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy`'s signature on TF2.

    A `tf.distribute.MultiWorkerMirroredStrategy` built with
    `communication_options=CommunicationOptions(implementation=communication)`.
    The cluster comes from `cluster_resolver`, or from `TF_CONFIG` when it is
    None. As in TF, build it before any other TensorFlow op in the process.

    `TF_CONFIG` is checked before anything starts (when the cluster comes from
    it): malformed JSON or a misspelt key raises `ValueError` naming
    `TF_CONFIG`, the key or position, and what is accepted, where TF would
    raise a bare `JSONDecodeError` or build a one-replica strategy; so is an
    empty or blank one. A task of the cluster (from TF_CONFIG or any
    `cluster_resolver`) that has not started after 30 s is named in a warning
    line on stderr (from a watcher process: TensorFlow holds the interpreter
    while it waits), and `$COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT` (seconds)
    bounds the wait.
    """

    def __init__(self, communication=CollectiveCommunication.AUTO, cluster_resolver=None):
        communication = _validate.communication(communication)
        _validate.cluster_resolver(
            "cluster_resolver",
            cluster_resolver,
            tpu=False,
            is_tpu=tpu.is_tpu_resolver(cluster_resolver),
        )
        if cluster_resolver is None or _reads_tf_config(cluster_resolver):
            config, source = _tf_config.from_environment(), "TF_CONFIG"
        else:  # TF waits for the tasks of any resolver's cluster alike
            config, source = _cluster_wait.from_resolver(cluster_resolver), "cluster_resolver"
        limit = _cluster_wait.deadline()
        with _cluster_wait.watching(config, limit, source):
            # Keywords only: V1 and V2 take these two in opposite orders.
            super().__init__(
                cluster_resolver=cluster_resolver,
                communication_options=_tf.CommunicationOptions(implementation=communication),
            )
        self.extended.__class__ = _CollectiveExtended


def _reads_tf_config(resolver):
    import tensorflow as tf

    return isinstance(resolver, tf.distribute.cluster_resolver.TFConfigClusterResolver)


_members.serve(MultiWorkerMirroredStrategy, _members.MWMS, _members.STRATEGY)
