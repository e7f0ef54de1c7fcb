"""The V1 member table: what TF1 code may call on a strategy, and how TF2 serves it.

One row a member (works, renamed or gone), served as descriptors; docs/migration.md's
member table is generated from it.
"""

import dataclasses

from compat_distribute import _steps
from compat_distribute import _tf
from compat_distribute import _user_line
from compat_distribute import _validate

WORKS = "works"
RENAMED = "renamed"
GONE = "gone"

TPU = "tpu"
MWMS = "mwms"
BOTH = (TPU, MWMS)

STRATEGY = "strategy"
EXTENDED = "extended"


@dataclasses.dataclass(frozen=True)
class Member:
    """One V1 member and how it is served."""

    name: str
    kind: str
    scope: str = STRATEGY
    shims: tuple = BOTH
    impl: object = None  # WORKS: the V1 behaviour, when TF2's differs or is missing.
    new: str = ""  # RENAMED: the member to use instead, relative to the strategy.
    version: str = ""  # RENAMED/GONE: the TensorFlow version that changed it.
    advice: str = ""  # GONE: what to do instead.
    note: str = ""  # WORKS with impl: how it differs from TF2, for the migration table.

    @property
    def message(self):
        if self.kind == RENAMED:
            return (
                f"{self.name} is deprecated; use {self.new} "
                f"(renamed in TensorFlow {self.version})"
            )
        if self.kind == GONE:
            return f"{self.name} was removed in TensorFlow {self.version}; {self.advice}"
        return ""


# V1 behaviours that TF2 changed or dropped. Each takes the shim object first.
# Those that wrap a TF2 member call TF's base implementation directly: none of
# the strategies shimmed here overrides `reduce`, `reduce_to` or `batch_reduce_to`.


def _reduce(self, reduce_op, value, axis=None):
    """V1 `reduce`: `axis` defaults to None (TF2 makes it required).

    Nested values are reduced leaf by leaf, and `axis` is ignored for scalars:
    TF2's multi-worker reduce takes one value at a time and rejects an axis on
    a scalar, and Keras 3's fit() relies on both under MultiWorkerMirroredStrategy.
    """
    _validate.reduce_op(reduce_op)
    if axis is None and not isinstance(value, (list, tuple, dict)):
        # The common call, a single value: no per-leaf work.
        _check_same_shapes(value)
        return _tf.StrategyBase.reduce(self, reduce_op, value, None)

    import tensorflow as tf

    def reduce_one(leaf):
        rank = _rank(leaf)
        leaf_axis = None if rank == 0 else axis
        _check_axis(leaf_axis, rank)
        if leaf_axis is None:
            _check_same_shapes(leaf)
        return _tf.StrategyBase.reduce(self, reduce_op, leaf, leaf_axis)

    return tf.nest.map_structure(reduce_one, value)


def _check_axis(axis, rank):
    """An axis past a value's rank fails with TensorFlow's text, first even inside a
    traced step (where TF's own error comes after AutoGraph's frames)."""
    if axis is None or rank is None or not isinstance(axis, int) or -rank <= axis < rank:
        return
    raise _validate.leading(ValueError(
        f"reduce: axis={axis} is out of range for a value of rank {rank}: Invalid reduction "
        f"dimension {axis} for input with {rank} dimensions. Pass an axis from {-rank} to "
        f"{rank - 1} to also reduce each replica's value along it, or axis=None to reduce "
        f"across replicas only."
    ))


def _check_same_shapes(value):
    """Replicas' values of different static shapes fail with why (TensorFlow's AddN
    says only that its inputs differ): most often a global batch smaller than the
    replica count, which leaves some replicas no examples (Keras 3's fit reduces
    its first batch so)."""
    values = getattr(value, "values", None)
    shapes = [getattr(v, "shape", None) for v in values] if isinstance(values, tuple) else []
    if len(shapes) < 2 or not all(s is not None and s.is_fully_defined() for s in shapes):
        return
    shapes = [s.as_list() for s in shapes]
    if all(s == shapes[0] for s in shapes):
        return
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    other = next(i for i, s in enumerate(shapes) if s != shapes[0])
    text = (
        f"reduce: the replicas' values differ in shape ({shapes[0]} on replica 0, "
        f"{shapes[other]} on replica {other}), and a reduction across replicas adds them "
        f"up element by element."
    )
    if all(len(s) == len(shapes[0]) and s[1:] == shapes[0][1:] for s in shapes):
        batch = sum(s[0] for s in shapes)
        text += (
            f" A batch of {batch} examples split over {len(shapes)} replicas gives some "
            f"replicas fewer (or none): make the global batch size a multiple of the "
            f"{len(shapes)} replicas (e.g. batch_size={len(shapes) * max(1, -(-batch // len(shapes)))}"
            f" in Keras' fit), or batch the dataset with drop_remainder=True."
        )
    raise tf.errors.InvalidArgumentError(None, None, text)


def _rank(value):
    values = getattr(value, "values", None)  # PerReplica / Mirrored
    if isinstance(values, tuple) and values:
        value = values[0]
    shape = getattr(value, "shape", None)
    return getattr(shape, "rank", None) if shape is not None else None


def _experimental_run(self, fn, input_iterator=None):
    """V1 `experimental_run(fn, input_iterator)`: one step on `get_next()`."""
    with self.scope():
        args = (input_iterator.get_next(),) if input_iterator is not None else ()
    return self.run(fn, args=args)


def _experimental_run_on_tpu(self, fn, input_iterator=None):
    """V1 `experimental_run` on a TPU: eagerly only for a `tf.function` `fn`.

    TF2 sends `experimental_run` to `run`, which a TPU accepts in eager mode for
    a `tf.function` (TF's own `test_all_reduce_*` run so). A plain Python `fn`
    in eager mode keeps TF 1.14's refusal, word for word, and the fix.
    """
    import tensorflow as tf

    if tf.executing_eagerly() and not tf.inside_function() and not _is_tf_function(fn):
        raise NotImplementedError(
            "Eager mode not supported in TPUStrategy outside TF functions. Call "
            "strategy.experimental_run(fn, iterator) inside a function decorated "
            "with @tf.function, or pass fn as a tf.function (TF1 refused a plain "
            "Python fn in eager mode on a TPU too)."
        )
    return _experimental_run(self, fn, input_iterator)


def _is_tf_function(fn):
    """What a TPU's `run` accepts in eager mode (TF's `validate_run_function`)."""
    import tensorflow as tf

    functions = (tf.types.experimental.PolymorphicFunction, tf.types.experimental.ConcreteFunction)
    return isinstance(fn, functions) or isinstance(getattr(fn, "__call__", None), functions)


def _make_dataset_iterator(self, dataset):
    """V1 iterator with `initialize()` and `get_next()`."""
    _validate.dataset("dataset", dataset)
    return _tf.make_dataset_iterator(self.extended, dataset)


def _make_input_fn_iterator(self, input_fn, replication_mode=None):
    import tensorflow as tf

    _validate.function(
        "input_fn", input_fn, hint=" Pass input_fn(input_context) returning a tf.data.Dataset."
    )
    per_worker = tf.distribute.InputReplicationMode.PER_WORKER
    mode = replication_mode or per_worker
    if mode != per_worker:
        raise ValueError(
            f"replication_mode must be InputReplicationMode.PER_WORKER (the only mode "
            f"TF1 supported); got {mode!r}."
        )
    with self.scope():
        return _tf.make_input_fn_iterator(self.extended, input_fn, mode)


def _experimental_make_numpy_dataset(self, numpy_input, session=None):
    _validate.numpy_input(numpy_input)
    return self.extended.experimental_make_numpy_dataset(numpy_input, session=session)


def _configure(self, session_config=None, cluster_spec=None, task_type=None, task_id=None):
    _validate.session_config(session_config)
    return _tf.configure(self.extended, session_config, cluster_spec, task_type, task_id)


def _no_ops(self):
    """V1 `initialize()`/`finalize()`: the ops to run first/last; TF2 strategies need none."""
    del self
    return []


def _steps_per_run(self):
    return self.extended.steps_per_run


def _hints_to_options(options, experimental_hints):
    """Maps TF1's `experimental_hints=CollectiveHints(...)` onto TF2's `options`."""
    if experimental_hints is None:
        return options
    if options is not None:
        raise ValueError(
            "Pass either options= or experimental_hints=, not both; experimental_hints "
            "is the TF1 name of options."
        )
    import tensorflow as tf

    return tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=experimental_hints.bytes_per_pack,
        timeout_seconds=experimental_hints.timeout_seconds,
    )


def _reduce_to(self, reduce_op, value, destinations, options=None, experimental_hints=None):
    """`reduce_to` that also takes TF1's `experimental_hints` (a CollectiveHints)."""
    options = _hints_to_options(options, experimental_hints)
    return _tf.StrategyExtendedV2.reduce_to(
        self, reduce_op, value, destinations, options=options
    )


def _batch_reduce_to(
    self, reduce_op, value_destination_pairs, options=None, experimental_hints=None
):
    options = _hints_to_options(options, experimental_hints)
    return _tf.StrategyExtendedV2.batch_reduce_to(
        self, reduce_op, value_destination_pairs, options=options
    )


def _property(fn):
    return property(fn, doc=fn.__doc__)


# One row per V1 member. `shims` limits a row to the TPU or the
# multi-worker shim where the V1 classes differed.
TABLE = (
    # tf.compat.v1.distribute.experimental.{TPU,MultiWorkerMirrored}Strategy
    Member("extended", WORKS),
    Member("num_replicas_in_sync", WORKS),
    Member("cluster_resolver", WORKS),
    Member("scope", WORKS),
    Member("run", WORKS),
    Member("group", WORKS),
    Member("experimental_local_results", WORKS),
    Member("experimental_distribute_dataset", WORKS),
    Member("distribute_datasets_from_function", WORKS),
    Member("update_config_proto", WORKS),
    Member("reduce", WORKS, impl=_reduce, note="`axis` defaults to None again (TF2 requires it)"),
    Member(
        "experimental_run",
        WORKS,
        shims=(MWMS,),
        impl=_experimental_run,
        note="runs `fn` on `input_iterator.get_next()`, eagerly or in a graph",
    ),
    Member(
        "experimental_run",
        WORKS,
        shims=(TPU,),
        impl=_experimental_run_on_tpu,
        note="runs `fn` on `input_iterator.get_next()` inside a `tf.function` or a TF1 "
        "graph, or eagerly when `fn` is a `tf.function` (as TF2's `run`); a plain Python `fn` in "
        "eager mode raises NotImplementedError naming `tf.function`, as TF1 did",
    ),
    Member(
        "make_dataset_iterator",
        WORKS,
        impl=_make_dataset_iterator,
        note="TF1 iterator with `initialize()` and `get_next()`",
    ),
    Member(
        "make_input_fn_iterator",
        WORKS,
        impl=_make_input_fn_iterator,
        note="TF1 iterator from `input_fn(InputContext)`; PER_WORKER only, as in TF1",
    ),
    Member(
        "experimental_make_numpy_dataset",
        WORKS,
        impl=_experimental_make_numpy_dataset,
        note="dropped from TF2 strategies; served from `extended`",
    ),
    Member(
        "configure",
        WORKS,
        impl=_configure,
        note="updates `session_config` in place, without TF's deprecation log",
    ),
    Member(
        "initialize",
        WORKS,
        impl=_no_ops,
        note="returns `[]`: no initialisation ops are needed, eager or in a graph (TPU set-up is "
        "`tf.tpu.experimental.initialize_tpu_system`)",
    ),
    Member(
        "finalize",
        WORKS,
        impl=_no_ops,
        note="returns `[]`: no finalisation ops are needed, eager or in a graph",
    ),
    Member(
        "steps_per_run",
        WORKS,
        shims=(TPU,),
        impl=_property(_steps_per_run),
        note="the constructor's value (default 1), also `extended.steps_per_run`",
    ),
    Member("experimental_run_v2", RENAMED, new="run", version="2.2"),
    Member(
        "experimental_distribute_datasets_from_function",
        RENAMED,
        new="distribute_datasets_from_function",
        version="2.4",
    ),
    Member("unwrap", RENAMED, new="experimental_local_results", version="2.0"),
    Member("colocate_vars_with", RENAMED, new="extended.colocate_vars_with", version="2.0"),
    Member(
        "experimental_make_numpy_iterator",
        GONE,
        version="2.0",
        advice="build the dataset with strategy.experimental_make_numpy_dataset(arrays)"
        ".batch(global_batch_size) and iterate over "
        "strategy.experimental_distribute_dataset(dataset).",
    ),
    # tf.distribute.StrategyExtended (v1)
    Member("experimental_between_graph", WORKS, EXTENDED),
    Member("experimental_require_static_shapes", WORKS, EXTENDED),
    Member("experimental_should_init", WORKS, EXTENDED),
    Member("parameter_devices", WORKS, EXTENDED),
    Member("should_checkpoint", WORKS, EXTENDED),
    Member("should_save_summary", WORKS, EXTENDED),
    Member("worker_devices", WORKS, EXTENDED),
    Member("broadcast_to", WORKS, EXTENDED),
    Member("call_for_each_replica", WORKS, EXTENDED),
    Member("colocate_vars_with", WORKS, EXTENDED),
    Member("experimental_make_numpy_dataset", WORKS, EXTENDED),
    Member("non_slot_devices", WORKS, EXTENDED),
    Member("read_var", WORKS, EXTENDED),
    Member("update", WORKS, EXTENDED),
    Member("update_non_slot", WORKS, EXTENDED),
    Member("value_container", WORKS, EXTENDED),
    Member("variable_created_in_scope", WORKS, EXTENDED),
    Member("steps_per_run", WORKS, EXTENDED, shims=(TPU,)),
    Member(
        "reduce_to",
        WORKS,
        EXTENDED,
        impl=_reduce_to,
        note="also takes TF1's `experimental_hints=CollectiveHints(...)`",
    ),
    Member(
        "batch_reduce_to",
        WORKS,
        EXTENDED,
        impl=_batch_reduce_to,
        note="also takes TF1's `experimental_hints=CollectiveHints(...)`",
    ),
    Member(
        "experimental_run_steps_on_iterator",
        WORKS,
        EXTENDED,
        impl=_steps.experimental_run_steps_on_iterator,
        note="one on-device loop (a `tf.function` in eager mode, a `tf.while_loop` in a TF1 "
        "graph); `iterations` may be a `tf.Variable` or scalar tensor, read at each call; "
        "`run_op` is the step count, and fetching it in a `Session` runs the steps",
    ),
)


# TF 1.12's DistributionStrategy, before the v1 API: "towers" became replicas
# and most members moved to `extended` in TF 1.13. Those whose call is
# unchanged are renamed; the rest are gone, with their v1 call as advice.
_TOWER_ERA_RENAMED = {
    "num_towers": "num_replicas_in_sync",
    "worker_devices": "extended.worker_devices",
    "parameter_devices": "extended.parameter_devices",
    "non_slot_devices": "extended.non_slot_devices",
    "read_var": "extended.read_var",
    "between_graph": "extended.experimental_between_graph",
    "should_init": "extended.experimental_should_init",
    "should_checkpoint": "extended.should_checkpoint",
    "should_save_summary": "extended.should_save_summary",
    "require_static_shapes": "extended.experimental_require_static_shapes",
}
_ARGUMENTS_AS_TUPLE_AND_DICT = "which takes fn's arguments as a tuple and a dict."
_TOWER_ERA_GONE = {
    "call_for_each_tower": "use strategy.extended.call_for_each_replica(fn, args=(...), "
    "kwargs={...}), " + _ARGUMENTS_AS_TUPLE_AND_DICT,
    "distribute_dataset": "use strategy.make_input_fn_iterator(lambda ctx: dataset_fn()) in a "
    "TF1 graph, or iterate over strategy.experimental_distribute_dataset(dataset_fn()).",
    "broadcast": "use strategy.extended.broadcast_to(tensor, destinations), whose destinations "
    "are required (TF 1.12's default was strategy.extended.worker_devices).",
    "batch_reduce": "use strategy.extended.batch_reduce_to(reduce_op, value_destination_pairs) "
    "with a tf.distribute.ReduceOp where TF 1.12 took a tf.VariableAggregation.",
    "fetch": "use strategy.extended.read_var(v) for a variable, or "
    "strategy.experimental_local_results(value) for the values on each device.",
    "update_non_slot": "use strategy.extended.update_non_slot(colocate_with, fn, args=(...), "
    "kwargs={...}), " + _ARGUMENTS_AS_TUPLE_AND_DICT,
    "tower_local_var_scope": "create the variables with synchronization="
    "tf.VariableSynchronization.ON_READ and aggregation=... under strategy.scope().",
}
TABLE += tuple(
    Member(name, RENAMED, new=new, version="1.13") for name, new in _TOWER_ERA_RENAMED.items()
) + tuple(
    Member(name, GONE, version="1.13", advice=advice) for name, advice in _TOWER_ERA_GONE.items()
)


class _Served:
    """Descriptor serving one row; `help()` shows the row's message."""

    def __init__(self, row):
        self.row = row
        self.__doc__ = row.message

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return self.serve(obj)


class _Renamed(_Served):
    """Warns at the caller's line, then returns the new member."""

    def serve(self, obj):
        _user_line.warn_at_user_line(self.row.message, DeprecationWarning)
        target = obj
        for part in self.row.new.split("."):
            target = getattr(target, part)
        return target


class _Gone(_Served):
    """Raises `AttributeError` with advice, so `hasattr` is False."""

    def serve(self, obj):
        raise AttributeError(f"{type(obj).__name__}.{self.row.message}")


def rows(shim, scope):
    return tuple(r for r in TABLE if shim in r.shims and r.scope == scope)


def serve(cls, shim, scope):
    """Installs the table's rows for `shim` (TPU or MWMS) and `scope` on the class `cls`."""
    for row in rows(shim, scope):
        if row.kind == RENAMED:
            setattr(cls, row.name, _Renamed(row))
        elif row.kind == GONE:
            setattr(cls, row.name, _Gone(row))
        elif row.impl is not None:
            setattr(cls, row.name, row.impl)
    return cls


def migration_table():
    """docs/migration.md's member table, as Markdown rows."""
    lines = ["| member | on | TF2 status | notes, or what to do |", "|---|---|---|---|"]
    for row in TABLE:
        if row.kind == WORKS and row.impl is None:
            continue
        where = "strategy" if row.scope == STRATEGY else "strategy.extended"
        on = " and ".join({TPU: "TPU", MWMS: "MultiWorkerMirrored"}[b] for b in row.shims)
        if row.kind == WORKS:
            status, todo = "works as in TF1", row.note
        elif row.kind == RENAMED:
            status, todo = f"renamed in TF {row.version} (warns)", f"use `{row.new}`"
        else:
            status, todo = f"removed in TF {row.version} (AttributeError)", row.advice
        lines.append(f"| `{where}.{row.name}` | {on} | {status} | {todo} |")
    return "\n".join(lines)
