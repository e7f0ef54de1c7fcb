"""`FakeTPUExtended`: MirroredExtended over the fake's cores, with the TPU's rules."""

import functools
import types
import weakref

import numpy as np
import tensorflow as tf

from compat_distribute import _input
from compat_distribute import _members
from compat_distribute import _validate
from compat_distribute.testing import _tf
from compat_distribute.testing._fake_tpu import system
from compat_distribute.testing._fake_tpu import variables


def check_reduce_op(reduce_op):
    """TF's reduce_to asserts SUM or MEAN with no text; the fake says it, as an AssertionError."""
    _validate.reduce_op(reduce_op)


def _core_index(device_assignment, cores_per_host, replica, logical_core):
    """Where a logical core runs among the slice's cores (host-major): its task's
    cores, then its ordinal on that task."""
    coordinates = device_assignment.coordinates(replica, logical_core)
    task = device_assignment.topology.task_ordinal_at_coordinates(coordinates)
    return task * cores_per_host + device_assignment.tpu_ordinal(replica, logical_core)


def tpu_devices(resolver, device_assignment):
    """[replica][logical core] -> core device, as TPUExtended's `_tpu_devices`: each
    logical core on the core its coordinates name, on that core's host."""
    cores = resolver.core_devices
    if device_assignment is None:
        return np.array([[d] for d in cores], dtype=object)
    cores_per_host = len(cores) // resolver.num_hosts
    return np.array(
        [
            [
                cores[_core_index(device_assignment, cores_per_host, r, c)]
                for c in range(device_assignment.num_cores_per_replica)
            ]
            for r in range(device_assignment.num_replicas)
        ],
        dtype=object,
    )


def input_workers(replica_devices):
    """TPUExtended's input pipelines: one per host, feeding the replicas whose
    logical core 0 is on it; hosts in the order of their first replica.

    As in TF's tpu_strategy.py (TPUExtended.__init__). Replica r takes element r
    of the pipelines' outputs, host by host, so where an assignment's replicas go
    to hosts out of order, a replica is fed by another host's pipeline, as on a
    pod. With `extended._enable_data_reorder` (off by default, as on a TPU) the
    outputs are ordered by device instead (TPUExtended's `_get_replica_order`).
    """
    by_host = {}
    for device in map(_tf.canonicalize_device, replica_devices):
        by_host.setdefault(_tf.host_for_device(device), []).append(device)
    return list(by_host.items())


class _TPUInput(_tf.MirroredExtended):
    """Input: TPUExtended's own code (its refusals of per-replica input, its spec
    checks, and `_enable_data_reorder`), over MirroredExtended's pipelines."""

    _experimental_distribute_dataset = _tf.TPUExtended._experimental_distribute_dataset  # pylint: disable=protected-access
    _distribute_datasets_from_function = _tf.TPUExtended._distribute_datasets_from_function  # pylint: disable=protected-access


class FakeTPUExtended(_input.QuietInputMixin, _TPUInput):
    """MirroredExtended over the first logical core of each replica, with TPU rules;
    distributed input with no autotuning thread to join (see `_input`)."""

    def __init__(self, container_strategy, resolver, device_assignment, spmd, steps_per_run):
        self._tpu_devices = tpu_devices(resolver, device_assignment)
        # Each replica computes on its logical core 0, as XLA's replica does.
        replica_devices = list(self._tpu_devices[:, 0])
        if resolver.pod is None:
            super().__init__(container_strategy, devices=replica_devices)
        else:  # Devices of several hosts.
            resolver.pod.init_extended(self, container_strategy, replica_devices)
        _tf.set_input_workers(self, input_workers(replica_devices))
        self._tpu_cluster_resolver = resolver
        self._tpu_metadata = resolver.get_tpu_system_metadata()
        self._device_assignment = device_assignment
        self._use_spmd_for_xla_partitioning = spmd
        self.steps_per_run = steps_per_run
        # As TPUExtended: static shapes wanted; partial batches of finite
        # datasets with a dynamic batch dimension are padded per replica.
        self._require_static_shapes = True
        self.experimental_enable_get_next_as_optional = True
        self._logical_device_stack = [0]
        # TPUExtended's switch (TF's tests set it): input ordered by device, not replica.
        self._enable_data_reorder = False
        self._runs_in_progress = 0  # > 0 while strategy.run traces or runs a step
        self._replica_functions = weakref.WeakKeyDictionary()  # tf.function step -> its clone

    @property
    def strict(self):
        return self._tpu_cluster_resolver.strict

    # TPUExtended's own code, which only reads the attributes set above.
    num_hosts = _tf.TPUExtended.num_hosts
    num_replicas_per_host = _tf.TPUExtended.num_replicas_per_host
    experimental_logical_device = _tf.TPUExtended.experimental_logical_device
    _check_spec = _tf.TPUExtended._check_spec  # pylint: disable=protected-access
    _configure = _tf.TPUExtended._configure  # pylint: disable=protected-access

    def _update_config_proto(self, config_proto):
        """TPUExtended's, and the session sees the fake's cores (`system.sees_every_cpu`)."""
        tpu_update = _tf.TPUExtended._update_config_proto  # pylint: disable=protected-access
        return system.sees_every_cpu(tpu_update(self, config_proto))

    @property
    def worker_devices(self):
        return tuple(self._tpu_devices[:, self._logical_device_stack[-1]])

    def _fake_tpu_replica_cores(self, replica_id):
        """A replica's logical cores' devices, core 0 first, for its variable reads."""
        return tuple(self._tpu_devices[replica_id])

    @property
    def parameter_devices(self):
        return self.worker_devices

    @property
    def tpu_hardware_feature(self):
        return _tf.HardwareFeature(self._tpu_cluster_resolver.tpu_hardware_feature)

    # V1 input iterators: on a pod, their ops have run on the hosts before use.

    def _make_dataset_iterator(self, dataset):
        return self._input_of_hosts(super()._make_dataset_iterator(dataset))

    def _make_input_fn_iterator(
        self, input_fn, replication_mode=tf.distribute.InputReplicationMode.PER_WORKER
    ):
        return self._input_of_hosts(super()._make_input_fn_iterator(input_fn, replication_mode))

    def _input_of_hosts(self, iterator):
        pod = self._tpu_cluster_resolver.pod
        return iterator if pod is None else pod.synced_input(iterator)

    def _create_variable(self, next_creator, **kwargs):
        # Inside experimental_logical_device(k), variables live on core k of each
        # replica, as on a TPU.
        core = self._logical_device_stack[-1]
        if core and kwargs.get("colocate_with") is None:
            kwargs["colocate_with"] = types.SimpleNamespace(
                _devices=tuple(self._tpu_devices[:, core])
            )
        return variables.adopt(super()._create_variable(next_creator, **kwargs))

    def _get_variable_creator_initial_value(self, replica_id, device, primary_var, **kwargs):
        """TPUExtended's rule: the initial value is computed once, on the first
        copy's device, and every copy starts from that tensor.

        MirroredExtended starts copy k > 0 from a read of copy 0, which inside a
        function depends on copy 0's captured handle: TensorFlow cannot lift it
        out of a step that creates variables. MirroredExtended's loop passes
        copy 0's return value to the later copies as `initial_value`.
        """
        del replica_id, device, primary_var  # The same value for every copy.
        initial_value = kwargs["initial_value"]
        if callable(initial_value):
            with _tf.maybe_init_scope():
                return initial_value()
        return initial_value

    def _call_for_each_replica(self, fn, args, kwargs):
        return super()._call_for_each_replica(self._in_tpu_replica_context(fn), args, kwargs)

    def _in_tpu_replica_context(self, fn):
        """`fn`, giving its replica context TPUReplicaContext's experimental_logical_device.

        MirroredStrategy's replica context lacks the member. A tf.function step is
        cloned around its Python function (as MirroredStrategy itself does), once,
        so it still runs all replicas in one function call.
        """
        is_function = hasattr(fn, "python_function")
        if is_function:
            cached = self._replica_functions.get(fn)
            if cached is not None:
                return cached
        inner = fn.python_function if is_function else fn
        logical_device = self.experimental_logical_device

        def replica_fn(*args, **kwargs):
            tf.distribute.get_replica_context().experimental_logical_device = logical_device
            return inner(*args, **kwargs)

        if not is_function:
            return replica_fn
        wrapped = _tf.clone_function(fn, replica_fn)
        self._replica_functions[fn] = wrapped
        return wrapped

    # Reductions. On a TPU every tensor in a step is a cross_replica_sum operand,
    # and a cross-replica reduce of a variable sums its copies.

    def _same_on_every_replica(self, value):
        """True for a tensor that is one object in every replica of a running step."""
        return (
            self._runs_in_progress > 0
            and not isinstance(value, tf.distribute.DistributedValues)
            and tf.is_tensor(value)
        )

    def _cross_replica_sum_of_same(self, reduce_op, value):
        if reduce_op == tf.distribute.ReduceOp.MEAN:
            return tf.identity(value)
        return value * tf.cast(self._num_replicas_in_sync, value.dtype)

    def _sum_of_copies(self, reduce_op, variable, destinations):
        """TPUExtended._reduce_to of a distributed variable: the sum of its copies."""
        copies = [tf.convert_to_tensor(v) for v in variable.values]
        output = tf.add_n(copies)
        if reduce_op == tf.distribute.ReduceOp.MEAN:
            output *= 1.0 / len(copies)
        devices = _tf.get_devices_from(destinations)
        if len(devices) == 1:
            with tf.device(devices[0]):
                return tf.identity(output)
        return _tf.simple_broadcast(output, destinations)

    def _reduce_to(self, reduce_op, value, destinations, options):
        if isinstance(reduce_op, str):
            reduce_op = tf.distribute.ReduceOp(reduce_op.upper())
        if self._same_on_every_replica(value):
            return self._cross_replica_sum_of_same(reduce_op, value)
        if isinstance(value, _tf.DistributedVariable):
            return self._sum_of_copies(reduce_op, value, destinations)
        if isinstance(value, _tf.PerReplica) and self._tpu_cluster_resolver.pod is not None:
            # MirroredExtended reduces to a CPU destination (a pod's every device)
            # with ReductionToOneDevice whatever its cross-device ops are: each
            # core's value would cross to one device, a gRPC transfer per core.
            return self._get_cross_device_ops(value).reduce(
                reduce_op, value, destinations, self._communication_options.merge(options)
            )
        return super()._reduce_to(reduce_op, value, destinations, options)

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        if not any(
            self._same_on_every_replica(v) or isinstance(v, _tf.DistributedVariable)
            for v, _ in value_destination_pairs
        ):
            return super()._batch_reduce_to(reduce_op, value_destination_pairs, options)
        return [self._reduce_to(reduce_op, v, d, options) for v, d in value_destination_pairs]

    _get_replica_order = _tf.TPUExtended._get_replica_order  # pylint: disable=protected-access

    @property
    def _replica_order(self):
        """What TF 2.15's TPUExtended input code reads (set in its __init__ there);
        TF 2.16 on call `_get_replica_order()`, which reads `_enable_data_reorder`."""
        if not self._enable_data_reorder:
            return None
        return self._get_replica_order(self._tpu_devices[:, 0])

    def _get_input_workers(self, options):
        return _tf.input_workers_with_options(self, options)

    def _in_multi_worker_mode(self):
        return False


_members.serve(FakeTPUExtended, _members.TPU, _members.EXTENDED)


def _checking_reduce_op(implementation):
    """`implementation` (the member table's reduce_to / batch_reduce_to), checking
    reduce_op first."""

    @functools.wraps(implementation)
    def method(self, reduce_op, *args, **kwargs):
        check_reduce_op(reduce_op)
        return implementation(self, reduce_op, *args, **kwargs)

    return method


FakeTPUExtended.reduce_to = _checking_reduce_op(FakeTPUExtended.reduce_to)
FakeTPUExtended.batch_reduce_to = _checking_reduce_op(FakeTPUExtended.batch_reduce_to)
