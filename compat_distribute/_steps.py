"""On-device step loops for TF2, eager or in a TF1 graph (`run_steps`).

TF1 ran `steps_per_run` steps per `session.run`; here a `tf.function` loops instead.
"""

import types

from compat_distribute import _tf
from compat_distribute import _user_line
from compat_distribute import _validate

_CACHE_ATTR = "_compat_distribute_step_loops"


def _cache(obj):
    # Kept on the strategy so loops die with it.
    return obj.__dict__.setdefault(_CACHE_ATTR, {})


def _fn_key(fn):
    # A bound method is a new object at each attribute access: key it by parts.
    if isinstance(fn, types.MethodType):
        return (fn.__func__, id(fn.__self__))
    return fn


# Step counts as int64 tensors, made once per count (a new eager constant per
# call costs more than the rest of run_steps' Python work).
_STEP_TENSORS = {}
_STEP_TENSORS_MAX = 64


def _steps_tensor(name, value, default):
    import tensorflow as tf

    steps = _validate.step_count(
        name,
        value,
        default=default,
        hint=f" Pass {name}=None to run steps_per_run steps, or a count >= 1.",
    )
    if not tf.executing_eagerly():  # a graph's constant belongs to that graph
        return tf.constant(steps, dtype=tf.int64)
    tensor = _STEP_TENSORS.get(steps)
    if tensor is None:
        if len(_STEP_TENSORS) >= _STEP_TENSORS_MAX:
            _STEP_TENSORS.clear()
        tensor = _STEP_TENSORS[steps] = tf.constant(steps, dtype=tf.int64)
    return tensor


def run_steps(strategy, fn, iterator, steps=None):
    """Runs `strategy.run(fn, args=(next(iterator),))` `steps` times on the device.

    The steps run inside one `tf.function` loop, one batch consumed per step.
    `steps` defaults to `strategy.extended.steps_per_run` (1 where the strategy
    has none). Returns the last step's per-replica outputs.
    """
    _validate.function("fn", fn)
    _validate.step_iterator("iterator", iterator, method="__next__")
    default = getattr(strategy.extended, "steps_per_run", None) or 1
    n = _steps_tensor("steps", steps, default)
    key = ("run_steps", _fn_key(fn))
    loops = _cache(strategy)
    loop = loops.get(key)
    if loop is None:
        loop = loops[key] = _make_run_steps_loop(strategy, fn)
    return loop(iterator, n)


def _make_run_steps_loop(strategy, fn):
    import tensorflow as tf

    @tf.function(autograph=True)
    def loop(iterator, steps):
        # The last step is after the loop, which then carries no outputs: the
        # loop is the TPU guide's hand-written one (carrying every replica's
        # outputs through each iteration costs time). Automatic control
        # dependencies order it after the loop (same iterator, same variables).
        for _ in tf.range(steps - 1):
            strategy.run(fn, args=(next(iterator),))
        return strategy.run(fn, args=(next(iterator),))

    return loop


def _iterations_tensor(value):
    """`iterations` as an int64 scalar tensor, read at each call.

    TF 1.14 Keras passed `K.variable(steps)` and changed it between calls, so a
    `tf.Variable` or scalar integer tensor is accepted besides an int. A value
    known now (an int, or an eager tensor or variable) is checked now; a graph
    tensor is checked when the loop runs.
    """
    import tensorflow as tf

    if not (isinstance(value, (tf.Variable, tf.Tensor)) or tf.is_tensor(value)):
        return _steps_tensor("iterations", value, 1)
    hint = " Pass a Python int >= 1, or a tf.Variable or scalar integer tensor holding one."
    if not value.dtype.is_integer or value.shape.rank != 0:
        raise TypeError(
            f"iterations must be a positive int or a scalar integer tensor; got a "
            f"{type(value).__name__} of dtype {value.dtype.name} and shape "
            f"{value.shape}.{hint}"
        )
    tensor = tf.cast(tf.convert_to_tensor(value), tf.int64)
    if tf.executing_eagerly():
        count = int(tensor.numpy())
        if count < 1:
            raise ValueError(
                f"iterations must be a positive int (>= 1); got {count} "
                f"(read from a {type(value).__name__}).{hint}"
            )
        return tensor
    check = tf.debugging.assert_greater_equal(
        tensor,
        tf.constant(1, tf.int64),
        message=f"iterations must be a positive int (>= 1).{hint}",
    )
    with tf.control_dependencies([check]):
        return tf.identity(tensor)


def experimental_run_steps_on_iterator(
    extended, fn, iterator, iterations=1, initial_loop_values=None
):
    """V1 `StrategyExtended.experimental_run_steps_on_iterator`, eager or graph.

    `fn(ctx, inputs)` is called with a `MultiStepContext` and
    `iterator.get_next()`, `iterations` times inside one loop: a `tf.function`
    in eager mode, a `tf.while_loop` in a TF1 graph. `iterations` is an int, or a `tf.Variable` or scalar integer tensor read at
    each call. Returns a `MultiStepContext`: `last_step_outputs` holds the
    values set with `ctx.set_last_step_output` in the last step,
    `non_tensor_outputs` those set with `ctx.set_non_tensor_output`, and
    `run_op` the number of steps run, an output of the loop. In eager mode the
    steps have run when the call returns; in graph mode, as in TF1, they run
    when `run_op` or `last_step_outputs` is fetched, once per `Session.run`
    whatever is fetched. In a graph, as in TF1, `fn` is built once and the
    loop carries the outputs it sets, starting from `initial_loop_values`
    (one value per output, in name order); `fn` does not see them. Eager
    loops ignore them.
    """
    _validate.function("fn", fn, hint=" Pass fn(ctx, inputs), called once a step.")
    _validate.step_iterator("iterator", iterator, method="get_next")
    n = _iterations_tensor(iterations)
    import tensorflow as tf

    if not tf.executing_eagerly() and not tf.inside_function():
        return _graph_loop(extended, fn, iterator, n, initial_loop_values)
    key = ("run_steps_on_iterator", _fn_key(fn), id(iterator))
    loops = _cache(extended)
    entry = loops.get(key)
    if entry is None:
        entry = loops[key] = _make_iterator_loop(extended, fn, iterator)
    loop, traced = entry
    outputs, steps_run = loop(n)
    template = traced["ctx"]
    ctx = _tf.multi_step_context(
        outputs, _tf.last_step_reduce_ops(template), template.non_tensor_outputs
    )
    ctx.run_op = steps_run
    return ctx


def _multi_step_context():
    """TF's `MultiStepContext`, whose `set_last_step_output` also takes TF 1.12's
    `aggregation` (a `tf.VariableAggregation`), with a DeprecationWarning."""
    import tensorflow as tf

    ctx = _tf.MultiStepContext()
    tf_set_last_step_output = ctx.set_last_step_output

    def set_last_step_output(name, output, reduce_op=None, aggregation=None):
        if aggregation is not None:
            if reduce_op is not None:
                raise TypeError(
                    f"set_last_step_output(): got both reduce_op={reduce_op!r} and "
                    f"aggregation={aggregation!r}, TF 1.12's name of it; pass only reduce_op."
                )
            _user_line.warn_at_user_line(
                "set_last_step_output's aggregation is deprecated; use reduce_op "
                "(renamed in TensorFlow 1.13)",
                DeprecationWarning,
            )
            if aggregation != tf.VariableAggregation.NONE:
                reduce_op = tf.distribute.ReduceOp.from_variable_aggregation(aggregation)
        return tf_set_last_step_output(name, output, reduce_op)

    ctx.set_last_step_output = set_last_step_output
    return ctx


def _make_iterator_loop(extended, fn, iterator):
    import tensorflow as tf

    traced = {}
    strategy = _tf.container_strategy(extended)

    @tf.function(autograph=True)
    def loop(iterations):
        ctx = _multi_step_context()
        traced["ctx"] = ctx
        with strategy.scope():
            fn(ctx, iterator.get_next())
            outputs = dict(ctx.last_step_outputs)
            # A loop output, so that fetching it in a graph runs the loop (a
            # constant would run nothing).
            steps_run = tf.constant(1, tf.int64)
            for _ in tf.range(iterations - 1):
                fn(ctx, iterator.get_next())
                outputs = dict(ctx.last_step_outputs)
                steps_run += 1
        return outputs, steps_run

    return loop, traced


def _graph_loop(extended, fn, iterator, iterations, initial_loop_values):
    """The TF1 graph version: a `tf.while_loop` in the caller's graph, no `tf.function`.

    As in TF1, `fn` is built once, into ordinary graph ops (its variables are
    created the TF1 way, not lifted out of a function), and what runs each step
    is what `fn` returns and the outputs it sets. The loop carries the last
    step's outputs, so, as TF1 required, `initial_loop_values` holds one
    initial value per output (in name order): on a TPU strategy the loop
    carries it once per replica, as TPUExtended's (a dict may also give an
    output one value per replica, see `_initial_carried`); elsewhere once per
    local result, as MirroredExtended's. One step (`iterations` known to be 1)
    builds no loop, as TPUExtended does, so the values `fn` set with
    `set_non_tensor_output` are the caller graph's and can be fetched.
    """
    import tensorflow as tf

    if isinstance(extended, _tf.TPUExtended):  # a real TPU: TF's own TF1 loop
        return _tf.tf1_run_steps_on_iterator(
            extended, fn, iterator, tf.cast(iterations, tf.int32), initial_loop_values
        )
    strategy = _tf.container_strategy(extended)
    ctx = _multi_step_context()
    # A TPU strategy (V1: it has steps_per_run) runs `fn` in each replica, so
    # its loop carries each output once per replica.
    replicas = strategy.num_replicas_in_sync if getattr(extended, "steps_per_run", None) else 0

    def step():
        result = fn(ctx, iterator.get_next())
        outputs = {
            name: tuple(strategy.experimental_local_results(value))
            for name, value in ctx.last_step_outputs.items()
        }
        ops = [r for r in tf.nest.flatten(result) if r is not None]
        if not ops and not outputs:
            raise ValueError(
                "experimental_run_steps_on_iterator: in a graph, fn must return the "
                "op(s) each step runs or set an output with "
                "ctx.set_last_step_output(name, value); this fn did neither, so "
                "nothing would run it (TF1 ran no step either). Return the train op."
            )
        return ops, outputs

    # Every op of the steps depends on `iterations`, and so on its check.
    with strategy.scope(), tf.control_dependencies([iterations]):
        if tf.get_static_value(iterations) == 1:
            ops, outputs = step()
            with tf.control_dependencies(ops + tf.nest.flatten(outputs)):
                steps_run = tf.constant(1, tf.int64)
        else:
            carried = _initial_carried(initial_loop_values, replicas)
            built = {}

            def body(i, *flat):
                del flat
                ops, outputs = step()
                built["outputs"] = outputs
                flat = _carried_outputs(outputs, replicas)
                _check_carried(carried, flat, outputs, replicas)
                # The count depends on the step, so fetching it alone runs the step.
                with tf.control_dependencies(ops + flat):
                    return [i + 1] + [tf.identity(t) for t in flat]

            loop = tf.while_loop(
                lambda i, *flat: i < iterations,
                body,
                [tf.constant(0, tf.int64)] + carried,
                parallel_iterations=1,
            )
            outputs = _outputs_of_loop(built["outputs"], loop[1:], replicas)
            with tf.control_dependencies(loop[1:]):
                steps_run = tf.identity(loop[0])
    reduce_ops = _tf.last_step_reduce_ops(ctx)
    last = {
        name: values[0] if reduce_ops.get(name) is not None else _tf.regroup(values)
        for name, values in outputs.items()
    }
    done = _tf.multi_step_context(last, reduce_ops, ctx.non_tensor_outputs)
    done.run_op = steps_run
    return done


def _initial_carried(initial_loop_values, replicas):
    """The loop's first values (`_carried_outputs`' order) from `initial_loop_values`.

    Where `replicas`, a dict's output may start from one value (TPUExtended's
    form, repeated per replica) or from one per replica: TF's portable idiom,
    the local results of `call_for_each_replica`, which on a TPU shim gives one
    value per replica where TPUExtended gave one.
    """
    import tensorflow as tf

    def tensors(value):
        return [tf.convert_to_tensor(v) for v in tf.nest.flatten(value)]

    if not replicas:
        return tensors(initial_loop_values or {})
    if not isinstance(initial_loop_values, dict):
        return tensors(initial_loop_values or []) * replicas
    per_name = [tensors(initial_loop_values[name]) for name in sorted(initial_loop_values)]
    carried = []
    for r in range(replicas):
        for values in per_name:
            carried += values[r : r + 1] if len(values) == replicas else values
    return carried


def _loop_positions(outputs, replicas):
    """Where each loop value comes from, as (name, index into its local results):
    in name order; replica by replica where `replicas` (a reduced output's one
    value repeated)."""
    names = sorted(outputs)
    if not replicas:
        return [(name, i) for name in names for i in range(len(outputs[name]))]
    return [(name, r % len(outputs[name])) for r in range(replicas) for name in names]


def _carried_outputs(outputs, replicas):
    """The loop values of one step's `outputs` ({name: local results})."""
    return [outputs[name][i] for name, i in _loop_positions(outputs, replicas)]


def _outputs_of_loop(outputs, flat, replicas):
    """{name: local results} from the loop's values (`_carried_outputs`' order)."""
    found = {}
    for position, value in zip(_loop_positions(outputs, replicas), flat):
        found.setdefault(position, value)  # A repeated reduced output: its first copy.
    return {name: tuple(found[name, i] for i in range(len(outputs[name]))) for name in sorted(outputs)}


def _check_carried(carried, flat, outputs, replicas):
    """Raises, as TF's TPU loop does, where the step's outputs do not match the
    values the loop starts with (`initial_loop_values`)."""
    have = [t.dtype for t in carried]
    want = [t.dtype for t in flat]
    if have == want:
        return
    names = sorted(outputs)

    def zeros(t):
        shape = t.shape.as_list() if t.shape.rank is not None else "shape"
        return f"tf.zeros({shape}, tf.{t.dtype.name})"

    example = ", ".join(
        f"{name!r}: " + (zeros(outputs[name][0]) if replicas or len(outputs[name]) == 1
                         else f"[{', '.join(zeros(t) for t in outputs[name])}]")
        for name in names
    )
    if replicas:
        per = "output (in a dict, one value or one per replica)"
    else:
        per = "local result of each output (one for a reduced output)"
    hint = (
        f" The steps set the outputs {names}: initial_loop_values needs one initial value per "
        f"{per}, in name order; it holds {len(carried) // (replicas or 1)}. Pass, as TF1 "
        f"required, initial_loop_values={{{example}}}."
    )
    if replicas:  # TPUExtended's training loop says so in these words.
        raise TypeError(
            f"Mismatch between input types and output types for training loop body: "
            f"{have} vs {want}.{hint}"
        )
    raise ValueError(
        f"experimental_run_steps_on_iterator: the loop starts with {len(have)} value(s) of "
        f"initial_loop_values, {have}, but each step gives {len(want)}, {want}.{hint}"
    )


class RunStepsMixin:
    """Adds the TF2-style `run_steps` to a strategy class."""

    def run_steps(self, fn, iterator, steps=None):
        return run_steps(self, fn, iterator, steps)


RunStepsMixin.run_steps.__doc__ = run_steps.__doc__
