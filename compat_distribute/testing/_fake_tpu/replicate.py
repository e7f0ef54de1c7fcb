"""One trace per step, replicated: the fake TPU's `run` as `tpu.replicate` does it.

A TPU traces the replica function once; MirroredStrategy calls it once a replica.
docs/design.md says what runs once, what runs per replica, and when.
"""

import contextlib
import threading
import warnings
import weakref

import tensorflow as tf

from compat_distribute import _env
from compat_distribute.testing import _tf
from compat_distribute.testing._fake_tpu import collectives
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
    return _env.read(ENV)


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
        in_trace = _trace_of(self) is not None and tf.inside_function()
        if in_trace:
            # Its copies are made outside the trace, eagerly, from an initial value
            # computed once there, as tf.function lifts a variable's initialisation.
            # tf.function's creators pass it on unseen, so the step is traced once.
            kwargs["initial_value"] = _lifted(kwargs["initial_value"])
            kwargs["experimental_enable_variable_lifting"] = False
        with tf.init_scope() if in_trace else contextlib.nullcontext():
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
        return collectives.all_reduce(self, reduce_op, values, _trace_of(self)[1])

    def _gather_to_implementation(self, value, destinations, axis, options):
        trace = _trace_of(self)
        if trace is None:
            return super()._gather_to_implementation(value, destinations, axis, options)
        tensor = _replica_tensor(self, value)
        if tensor.shape.rank is None and len(self.worker_devices) > 1:
            raise FallBack("all_gather of a tensor of unknown rank")
        return collectives.all_gather(self, tensor, axis, trace[1])

    def _broadcast_to(self, tensor, destinations):
        trace = _trace_of(self)
        if trace is None or isinstance(tensor, (int, float)):
            return super()._broadcast_to(tensor, destinations)
        # The first replica's value, as TPUExtended._broadcast_to in a TPU context.
        tensor = _replica_tensor(self, tensor)
        first = tf.equal(trace[1], 0)
        masked = tf.where(first, tensor, tf.zeros_like(tensor))
        return collectives.all_reduce(self, tf.distribute.ReduceOp.SUM, [masked], trace[1])[0]

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


def _lifted(initial_value):
    """`initial_value` of a variable made in the trace, computed outside it: a
    callable is called there; a tensor of the trace is lifted out of it as
    tf.function lifts initialisers, unless it reads the trace's arguments or a
    variable (a placeholder of the trace): then the step runs per replica."""
    if callable(initial_value):
        with tf.init_scope():
            return initial_value()
    unliftable = FallBack("a variable it creates takes its initial value from its arguments or variables")
    if isinstance(initial_value, tf.Variable):  # read when the step runs, not now
        raise unliftable
    if not tf.is_symbolic_tensor(initial_value):
        return initial_value

    def lift():
        return _tf.lift_to_graph([initial_value], tf.compat.v1.get_default_graph())[initial_value]

    with tf.init_scope():
        try:
            return tf.function(lift, autograph=False)()
        except _tf.UnliftableError:
            raise unliftable from None


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


_LOOP_OPS = ("While", "StatelessWhile")


def _collective_in_loop(graph):
    """Whether a collective op of `graph` sits in the body of a while loop."""
    library = {f.signature.name: f for f in graph.as_graph_def().library.function}

    # No generator: AutoGraph converts this when a user's tf.function runs a step,
    # and warns that it cannot convert generators.
    def called(nodes):
        return [
            name
            for node in nodes
            for attr in node.attr.values()
            for name in ([attr.func.name] if attr.HasField("func") else [f.name for f in attr.list.func])
        ]

    loop_nodes = [n for n in graph.as_graph_def().node if n.op in _LOOP_OPS]
    loop_nodes += [n for f in library.values() for n in f.node_def if n.op in _LOOP_OPS]
    pending, seen = list(called(loop_nodes)), set()
    while pending:
        name = pending.pop()
        if name in seen or name not in library:
            continue
        seen.add(name)
        nodes = library[name].node_def
        if any(n.op.startswith("Collective") for n in nodes):
            return True
        pending.extend(called(nodes))
    return False


def _own_executor(concrete, replica_id_spec, specs):
    """`concrete` called from a function that is never inlined.

    A collective's key holds the id of its while loop's frame, named after the
    loop's node; inlined into one graph, the replicas' loops get different names,
    so their collectives never meet (a hang). Each replica running the same
    function in its own executor names its loops alike.
    """
    wrapper = tf.function(
        lambda replica_id, tensors: concrete(replica_id, tensors),
        autograph=False,
        experimental_attributes={"_noinline": True},
    )
    return wrapper.get_concrete_function(replica_id_spec, specs)


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
    replica_id_spec = tf.TensorSpec([], tf.int32)
    concrete = body.get_concrete_function(replica_id_spec, specs)
    if _collective_in_loop(concrete.graph):
        concrete = _own_executor(concrete, replica_id_spec, specs)
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
            outputs = call_in_step(replicated, inputs)
    finally:
        concrete.set_external_captures(captures[0])
    # Each replica's outputs on its device, as on a TPU (the call's own outputs
    # are on the device of the call).
    for r, device in enumerate(devices):
        with tf.device(device):
            outputs[r] = tf.nest.map_structure(_on_this_device, outputs[r])
    return _tf.regroup(tuple(outputs))


def call_in_step(replicated, inputs):
    """`replicated(inputs)`, called in the step's function: TensorFlow inlines the
    replicas' calls into it and optimises them with the step at its first run
    (docs/design.md says why this beats a call without Grappler, or tiers)."""
    return tf.function(replicated, autograph=False)(inputs)


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
