"""One trace per step, replicated: the fake TPU's `run` as `tpu.replicate` does it.

A TPU traces the replica function once and the compiler copies the program to
every core. MirroredStrategy, which the fake is underneath, calls the Python
function once per replica in a thread per device. With the trace mode "once"
the fake does what the TPU does:

- the replica function is traced ONCE, in a replica context whose
  `replica_id_in_sync_group` is a tensor argument of the trace (so
  `tf.get_static_value` of it is None, as on a TPU); Python side effects in the
  function run once per trace;
- the trace is called once per replica, under `tf.device` of the replica's
  core, with that replica's inputs; the trace reads and writes the first
  replica's copy of each variable, and each call passes its own replica's
  copies in place of those captured handles (a variable's trace signature has
  no device, so one trace serves every replica);
- the calls sit in one function of their own, where they run side by side
  (automatic control dependencies would otherwise chain calls that share a
  resource, and a collective in the first call would wait for the second);
- on a pod, each host's replicas are called from one function of that host
  (`pod_replicate`), and sums run within each host before across the hosts;
- cross-replica operations are collective ops over the replicas' devices (from
  16 replicas on, two rings), keyed by the strategy's own key allocator:
  `all_reduce`, `all_gather`, `merge_call` with `reduce_to` /
  `batch_reduce_to` (gradients are packed into one collective per dtype),
  `update` (each replica updates its own copy, as TPUExtended._update does in a
  TPU context) and `broadcast_to` (the first replica's value, as on a TPU).

`merge_call` runs its `merge_fn` once per trace in cross-replica context with
this replica's values, as TPUStrategy's does: `experimental_local_results` of
an argument has one element, not one per replica.

"once" is the default. The per-replica mode (MirroredStrategy's threads)
stays for comparison and as a fallback, chosen by
`COMPAT_DISTRIBUTE_FAKE_TPU_TRACE=per_replica|once` (read when a strategy is
built) or `set_trace_mode(strategy, mode)`. In "once" mode a step still runs
per replica:

- in a TF1 graph (a `Session`): MirroredStrategy itself reduces without
  collectives there, and the legacy graph programs rely on it;
- with a RuntimeWarning, for a plain Python function run eagerly (TPUStrategy
  refuses it; `extended.call_for_each_replica` may be called so), or when a
  per-replica value reaches a cross-replica operation inside the trace or a
  `merge_fn` returns one (the trace holds one value per replica, never N).
  Python side effects of the abandoned trace have run once by then.

Variables created inside the trace (a Keras optimizer building its slots on
the first step) make `tf.function` trace the step twice, as it does for any
function creating variables; build the optimizer first for one trace.
"""

import contextlib
import functools
import os
import threading
import warnings
import weakref

import tensorflow as tf

from compat_distribute.testing import _tf
from compat_distribute.testing._fake_tpu import extended as extended_lib
from compat_distribute.testing._fake_tpu import pod_replicate

ENV = "COMPAT_DISTRIBUTE_FAKE_TPU_TRACE"
PER_REPLICA = "per_replica"
ONCE = "once"
MODES = (PER_REPLICA, ONCE)
DEFAULT_MODE = ONCE

_CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")


def check_mode(mode, source="mode"):
    """`mode` if it is a trace mode; a ValueError naming the modes otherwise."""
    if mode not in MODES:
        raise ValueError(
            f"{source} must be one of {MODES}; got {mode!r}. {ONCE!r} traces the replica "
            f"function once, as a TPU does; {PER_REPLICA!r} traces it once per replica, "
            f"as MirroredStrategy does."
        )
    return mode


def mode_from_environment():
    """The trace mode `COMPAT_DISTRIBUTE_FAKE_TPU_TRACE` names, or the default when unset."""
    raw = os.environ.get(ENV, "").strip()
    return check_mode(raw, f"${ENV}") if raw else DEFAULT_MODE


def set_trace_mode(strategy, mode):
    """Makes `strategy` (a fake TPU strategy) trace its steps in `mode` from now on.

    Steps already traced keep the mode they were traced in (a `tf.function`
    traces again only when its inputs change).
    """
    extended = getattr(strategy, "extended", None)
    if not isinstance(extended, ReplicatingExtended):
        raise TypeError(
            f"set_trace_mode needs a fake TPU strategy (compat_distribute.testing."
            f"FakeTPUStrategy); got {type(strategy).__name__}."
        )
    extended.trace_mode = check_mode(mode)


# The trace being built in this thread: (extended, replica id tensor) or absent.
_local = threading.local()


def _trace_of(extended):
    trace = getattr(_local, "trace", None)
    if trace is not None and trace[0] is extended:
        return trace
    return None


@contextlib.contextmanager
def _tracing(extended, replica_id):
    outer = getattr(_local, "trace", None)
    _local.trace = (extended, replica_id)
    try:
        yield
    finally:
        _local.trace = outer


class FallBack(BaseException):
    """Raised inside a trace when a step cannot be one trace; it runs per replica instead.

    Not an Exception: a step's own `except Exception` must not swallow it.
    """


class OneTraceReplicaContext(tf.distribute.ReplicaContext):
    """The replica context of the one trace: the replica id is a tensor input.

    Variables resolve to the first replica's copy (`_replica_id` is 0), whose
    captured handles each replica's call replaces with its own copies.
    """

    @property
    def _replica_id(self):
        return 0

    def _merge_call(self, merge_fn, args, kwargs):
        # TPUStrategy's: merge_fn runs once, in cross-replica context, on this
        # replica's values; its Mirrored results come back as this replica's.
        result = super()._merge_call(merge_fn, args, kwargs)
        return tf.nest.map_structure(_own_value, result)


def _own_value(value):
    if isinstance(value, tf.distribute.DistributedValues) and not isinstance(value, _tf.DistributedVariable):
        if len(value.values) != 1:
            raise FallBack(f"merge_call returned {len(value.values)} per-replica values")
        return value.values[0]
    return value


class ReplicatingExtended(extended_lib.FakeTPUExtended):
    """FakeTPUExtended that traces a step once (trace mode "once") and replicates it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trace_mode = mode_from_environment()
        self._one_trace_functions = weakref.WeakKeyDictionary()  # tf.function -> clone
        self._fell_back = set()  # reasons already warned

    def _one_trace_applies(self, fn):
        # TF1 graphs always run per replica (see the module docstring).
        if self.trace_mode != ONCE or not tf.compat.v1.executing_eagerly_outside_functions():
            return False
        if tf.executing_eagerly() and not hasattr(fn, "python_function"):
            self._warn_fallback("a plain Python function run eagerly")
            return False
        return True

    def _warn_fallback(self, reason):
        if reason not in self._fell_back:
            self._fell_back.add(reason)
            warnings.warn(
                f"The fake TPU traces this step once per replica ({reason}); trace mode "
                f"{ONCE!r} does not apply there.",
                RuntimeWarning,
                stacklevel=4,
            )

    def _call_for_each_replica(self, fn, args, kwargs):
        if not self._one_trace_applies(fn):
            return super()._call_for_each_replica(fn, args, kwargs)
        fn = self._in_tpu_replica_context(fn)
        if hasattr(fn, "python_function"):  # Eager run of a tf.function: trace inside it.
            clone = self._one_trace_functions.get(fn)
            if clone is None:
                python_function = fn.python_function

                def replicated(*a, **k):
                    return self._replicate_or_fall_back(python_function, a, k)

                clone = _tf.clone_function(fn, replicated)
                self._one_trace_functions[fn] = clone
            return clone(*args, **kwargs)
        return self._replicate_or_fall_back(fn, args, kwargs)

    def _replicate_or_fall_back(self, fn, args, kwargs):
        try:
            return replicate(self, fn, args, kwargs)
        except FallBack as reason:
            self._warn_fallback(str(reason))
            return _tf.MirroredExtended._call_for_each_replica(self, fn, args, kwargs)

    def _create_variable(self, next_creator, **kwargs):
        return register_variable(super()._create_variable(next_creator, **kwargs))

    # Cross-replica operations inside the one trace.

    def _reduce_to(self, reduce_op, value, destinations, options):
        if _trace_of(self) is None:
            return super()._reduce_to(reduce_op, value, destinations, options)
        return self._batch_reduce_to(reduce_op, [(value, destinations)], options)[0]

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        if _trace_of(self) is None:
            return super()._batch_reduce_to(reduce_op, value_destination_pairs, options)
        if isinstance(reduce_op, str):
            reduce_op = tf.distribute.ReduceOp(reduce_op.upper())
        values = [_replica_tensor(self, v) for v, _ in value_destination_pairs]
        return all_reduce(self, reduce_op, values)

    def _gather_to_implementation(self, value, destinations, axis, options):
        if _trace_of(self) is None:
            return super()._gather_to_implementation(value, destinations, axis, options)
        return all_gather(self, _replica_tensor(self, value), axis)

    def _broadcast_to(self, tensor, destinations):
        trace = _trace_of(self)
        if trace is None or isinstance(tensor, (int, float)):
            return super()._broadcast_to(tensor, destinations)
        # The first replica's value, as TPUExtended._broadcast_to in a TPU context.
        tensor = _replica_tensor(self, tensor)
        first = tf.equal(trace[1], 0)
        return all_reduce(
            self, tf.distribute.ReduceOp.SUM, [tf.where(first, tensor, tf.zeros_like(tensor))]
        )[0]

    def _update(self, var, fn, args, kwargs, group):
        if _trace_of(self) is None:
            return super()._update(var, fn, args, kwargs, group)
        # As TPUExtended._update in a TPU context: this replica's copy, once.
        args, kwargs = tf.nest.map_structure(_own_value, (args, kwargs))
        result = fn(own_copy(self, var), *args, **kwargs)
        return result if group else (result,)

    def _update_non_slot(self, colocate_with, fn, args, kwargs, group):
        if _trace_of(self) is None:
            return super()._update_non_slot(colocate_with, fn, args, kwargs, group)
        result = fn(*args, **kwargs)
        return result if group else (result,)


def own_copy(extended, var):
    """The copy of `var` the trace reads: the one on the first replica's cores."""
    index_on = getattr(var, "_index_on", None)
    if index_on is None:
        return var.values[0] if isinstance(var, _tf.DistributedVariable) else var
    return var.values[index_on(extended._fake_tpu_replica_cores(0))]  # pylint: disable=protected-access


def _replica_tensor(extended, value):
    """`value` as a tensor of this replica; a variable reads this replica's copy
    (reading the variable itself in cross-replica context would reduce it)."""
    if isinstance(value, tf.IndexedSlices):
        # A TPU sums sparse gradients densely too.
        return tf.convert_to_tensor(value)
    if isinstance(value, _tf.DistributedVariable):
        return tf.convert_to_tensor(own_copy(extended, value))
    if isinstance(value, tf.distribute.DistributedValues):
        raise FallBack("a per-replica value reached a cross-replica operation")
    return tf.convert_to_tensor(value)


# Collectives.


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


def _collective_sum(extended, tensor):
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
            tensor, _trace_of(extended)[1], devices, hosts, functools.partial(_collective, extended)
        )
    inner = 1
    if count >= TWO_STAGE_MIN_REPLICAS:
        inner = max(a for a in range(1, int(count**0.5) + 1) if count % a == 0)
    if inner == 1:
        return _collective(extended, tensor, [devices], None)
    replica_id = _trace_of(extended)[1]
    groups = [devices[g : g + inner] for g in range(0, count, inner)]
    tensor = _collective(extended, tensor, groups, replica_id // inner)
    ranks = [devices[r::inner] for r in range(inner)]
    return _collective(extended, tensor, ranks, replica_id % inner)


def all_reduce(extended, reduce_op, tensors):
    """Each tensor summed (or averaged) over the replicas; one collective per dtype."""
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
        summed = _collective_sum(extended, packed)
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


def all_gather(extended, tensor, axis):
    """`tensor` of every replica, in replica order, concatenated along `axis`.

    Summed into this replica's slot of a stack (TPUs need equal shapes on
    every replica too), so the order is the replicas' whatever the group's
    device ranks are.
    """
    trace = _trace_of(extended)
    count = len(extended.worker_devices)
    if count == 1:
        return tensor
    if tensor.shape.rank is None:
        raise FallBack("all_gather of a tensor of unknown rank")
    slot = tf.one_hot(trace[1], count, dtype=tensor.dtype)
    stacked = tf.reshape(slot, [count] + [1] * tensor.shape.rank) * tensor[tf.newaxis]
    stacked = _collective_sum(extended, stacked)
    return tf.concat(tf.unstack(stacked, num=count), axis=axis)


# The one trace.


def _input_spec(values):
    """The spec one trace takes for each replica's `values` (their common supertype)."""
    specs = [tf.type_spec_from_value(v) for v in values]
    common = specs[0].most_specific_common_supertype(specs[1:])
    if common is None:
        raise FallBack(f"replicas' inputs differ in kind: {specs[0]} and {specs[1:]}")
    return common


def _rebound_captures(extended, concrete, replica):
    """The trace's captured inputs for `replica`: the first replica's copy of each
    variable and `replica`'s own copy trade places (a read of every copy still
    reads each once)."""
    cores = extended._fake_tpu_replica_cores(replica)  # pylint: disable=protected-access
    first = extended._fake_tpu_replica_cores(0)  # pylint: disable=protected-access
    captured = []
    for tensor in concrete.captured_inputs:
        ref = _VARIABLE_OF_HANDLE.get(id(tensor))
        var = ref() if ref is not None else None
        index_on = getattr(var, "_index_on", None)
        if replica and index_on is not None:
            handles = [copy.handle for copy in var.values]
            a, b = index_on(first), index_on(cores)
            if tensor is handles[a]:
                tensor = handles[b]
            elif tensor is handles[b]:
                tensor = handles[a]
        captured.append(tensor)
    return captured


# id(handle of a copy) -> weakref to its distributed variable, for every
# variable a fake strategy made (see ReplicatingExtended._create_variable).
_VARIABLE_OF_HANDLE = {}


def register_variable(variable):
    """Lets the one trace find `variable` from its copies' handles; returns it."""
    if isinstance(variable, _tf.DistributedVariable):
        ref = weakref.ref(variable)
        for copy in variable.values:
            key = id(copy.handle)
            _VARIABLE_OF_HANDLE[key] = ref
            weakref.finalize(copy, _VARIABLE_OF_HANDLE.pop, key, None)
    return variable


def _on_this_device(value):
    return tf.identity(value) if isinstance(value, tf.Tensor) else value


def replicate(extended, fn, args, kwargs):
    """Traces `fn` once and calls the trace on every replica; returns per-replica outputs."""
    devices = extended.worker_devices
    count = len(devices)
    per_replica = [_tf.select_replica(i, (tuple(args), dict(kwargs or {}))) for i in range(count)]
    structure = per_replica[0]
    leaves = [tf.nest.flatten(p) for p in per_replica]
    tensor_at = [
        i for i, leaf in enumerate(leaves[0])
        if tf.is_tensor(leaf) and not isinstance(leaf, tf.Variable)
        and not isinstance(leaf, _tf.DistributedVariable)
    ]
    for i, leaf in enumerate(leaves[0]):
        # Only tensors become inputs of the trace; anything else is replica 0's.
        if i not in tensor_at and any(leaves[r][i] is not leaf for r in range(1, count)):
            raise FallBack(f"the replicas' inputs hold a {type(leaf).__name__} that differs by replica")
    specs = [_input_spec([leaves[r][i] for r in range(count)]) for i in tensor_at]
    fn = tf.__internal__.autograph.tf_convert(fn, tf.__internal__.autograph.control_status_ctx())

    def replica_body(replica_id, tensors):
        filled = list(leaves[0])
        for i, t in zip(tensor_at, tensors):
            filled[i] = t
        a, k = tf.nest.pack_sequence_as(structure, filled)
        with _tracing(extended, replica_id), OneTraceReplicaContext(
            extended._container_strategy(), replica_id  # pylint: disable=protected-access
        ):
            return fn(*a, **k)

    body = tf.function(replica_body, autograph=False)
    concrete = body.get_concrete_function(tf.TensorSpec([], tf.int32), specs)
    captures = [_rebound_captures(extended, concrete, r) for r in range(count)]
    inputs = [[leaves[r][i] for i in tensor_at] for r in range(count)]

    def call_replica(r, replica_inputs):
        graph = tf.compat.v1.get_default_graph()
        start = len(graph.get_operations())
        with tf.device(devices[r]):
            concrete.set_external_captures(captures[r])
            output = concrete(tf.constant(r, tf.int32), replica_inputs)
        _side_by_side(graph, start)
        return output

    on_pod = pod_replicate.host_groups(devices) is not None

    def replicated(inputs):
        return [call_replica(r, inputs[r]) for r in range(count)]

    try:
        if on_pod:
            # One call per host (see pod_replicate), in the step's own graph: its
            # outputs go from the host's call to its cores within the host.
            outputs = pod_replicate.call_by_host(devices, call_replica, inputs, _side_by_side)
        else:
            outputs = tf.function(replicated, autograph=False)(inputs)
    finally:
        concrete.set_external_captures(captures[0])
    # Each replica's outputs on its device, as on a TPU (the call's own outputs
    # are on the device of the call).
    for r, device in enumerate(devices):
        with tf.device(device):
            outputs[r] = tf.nest.map_structure(_on_this_device, outputs[r])
    return _tf.regroup(tuple(outputs))


def _side_by_side(graph, start):
    """Lets the calls added to `graph` since its op `start` run side by side, as
    TPU cores do (automatic control dependencies would chain calls that share a
    resource, and a collective in the first call would wait for the second)."""
    manager = getattr(graph, "experimental_acd_manager", None)
    if manager is None:  # No automatic control dependencies: nothing chains them.
        return
    for op in graph.get_operations()[start:]:
        if op.type in _CALL_OPS:
            manager.run_independently(op)
