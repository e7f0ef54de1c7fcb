"""The public entry points: check a Python step or an already traced graph; strict mode."""

from __future__ import annotations

import contextlib
import inspect
import threading

import tensorflow as tf

from compat_distribute.testing.xla_check import compiling, errors, rules
from compat_distribute.testing.xla_check.report import TPUCompatibilityReport, TPUProblem
from compat_distribute.testing.xla_check.source import user_frame
from compat_distribute.testing.xla_check.walker import Walker


# Process-wide, not per thread: MirroredStrategy traces each replica's step in
# a thread of its own.
_TRACING = [0]
_TRACING_LOCK = threading.Lock()


def tracing():
    """True while a step is traced for a check.

    A strict fake TPU's `run` asks, so the check's own trace of a step is not
    checked again from inside (and cannot raise there); the fake's variables
    ask, since XLA on the CPU cannot compile a captured packed handle.
    """
    return _TRACING[0] > 0


@contextlib.contextmanager
def _tracing():
    with _TRACING_LOCK:
        _TRACING[0] += 1
    try:
        yield
    finally:
        with _TRACING_LOCK:
            _TRACING[0] -= 1


def _as_graph(graph_or_function):
    graph = getattr(graph_or_function, "graph", graph_or_function)
    if not hasattr(graph, "get_operations"):
        raise TypeError(
            "check_graph(graph_or_function=...) takes a tf.Graph / FuncGraph or "
            "a ConcreteFunction (tf.function(f).get_concrete_function(...)); "
            f"received {graph_or_function!r} of type "
            f"{type(graph_or_function).__name__}. To check a Python step, call "
            "check_tpu_compatible(fn, *args) instead."
        )
    return graph


def check_graph(graph_or_function, *, compile_ops: bool = True) -> TPUCompatibilityReport:
    """Checks an already traced step without tracing it again.

    Args:
      graph_or_function: a `FuncGraph` (or `tf.Graph`) or a `ConcreteFunction`,
        e.g. the one a strategy traced for `strategy.run`.
      compile_ops: compile each unsupported op alone with XLA to attach TF's
        own error text (one small compile per distinct op; cached).

    Returns:
      A `TPUCompatibilityReport`; `compiled` is None (the graph as a whole is
      not compiled here).
    """
    graph = _as_graph(graph_or_function)
    walker = Walker()
    walker.walk_graph(graph)
    if compile_ops:
        compiling.attach_messages(walker, None)
    return TPUCompatibilityReport.of(
        graph.name, walker.entries, None, "not compiled as a whole: check_graph walks a traced graph"
    )


def _replica_step(fn, strategy, args, kwargs):
    """The callable whose trace is the replica computation, and its specs.

    Tensors become `tf.TensorSpec` inputs (so no value is folded into the
    graph); everything else (Python values, variables, distributed values) is
    bound as it is, as tracing would bind it.
    """
    leaves = tf.nest.flatten((args, kwargs))
    tensor_at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, tf.Tensor)]
    specs = [tf.TensorSpec.from_tensor(leaves[i]) for i in tensor_at]

    def replica_step(*tensors):
        filled = list(leaves)
        for i, tensor in zip(tensor_at, tensors):
            filled[i] = tensor
        call_args, call_kwargs = tf.nest.pack_sequence_as((args, kwargs), filled)
        if strategy is None:
            return fn(*call_args, **call_kwargs)
        return strategy.run(fn, args=call_args, kwargs=call_kwargs)

    return replica_step, specs


def _static(specs):
    return [
        (
            tf.TensorSpec([1 if d is None else d for d in spec.shape], spec.dtype)
            if spec.shape.rank is not None
            else spec
        )
        for spec in specs
    ]


def _step_lines(fn):
    """`(filename, first line, last line)` of the step's source, or None."""
    inner = getattr(fn, "python_function", fn)
    code = getattr(inner, "__code__", None) or getattr(getattr(inner, "__call__", None), "__code__", None)
    if code is None:
        return None
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        lines, first = [""], code.co_firstlineno
    return code.co_filename, first, first + len(lines) - 1


def _returned_by(tensor):
    """The op that made a returned tensor, past the identities tracing adds."""
    op = tensor.op
    while op.type == "Identity" and op.inputs:
        op = op.inputs[0].op
    return op


def _check_returns(walker, graph, fn):
    """Adds an entry for each value the step returns in a dtype its `RETURNS_OFF_TPU` rules name.

    Placed on the line that made the value when it is in the step (a returned
    `tf.constant("...")`), else on the step's `def` line (a returned Python str
    becomes a tensor after the step returned).
    """
    step_rules = [r for r in rules.RULES if r.test == rules.RETURNS_OFF_TPU]
    # An op already reported (a replica's copy of it too: the same line) is not reported again.
    reported = {e.op_name for e in walker.entries} | {
        (e.filename, e.lineno) for e in walker.entries if e.filename
    }
    lines = _step_lines(fn)
    seen = set()
    for output in graph.outputs:
        dtype = output.dtype.name
        rule = next((r for r in step_rules if r.dtypes is None or dtype in r.dtypes), None)
        made_by = _returned_by(output)
        filename, lineno = user_frame(made_by)
        if rule is None or dtype in rules.TPU_DTYPES or reported & {made_by.name, (filename, lineno)}:
            continue
        if lines is not None and not (filename == lines[0] and lines[1] <= lineno <= lines[2]):
            filename, lineno = lines[0], lines[1]
        if (filename, lineno, dtype) in seen:
            continue  # one entry for the copies of a multi-replica step
        seen.add((filename, lineno, dtype))
        walker.entries.append(
            TPUProblem(
                rule.kind,
                "_Retval",  # what XLA calls a returned value
                output.op.name,
                graph.name,
                filename,
                lineno,
                rule.reason("_Retval", (dtype,)),
                rule=rule.name,
            )
        )


def _check_step_arguments(entry, fn, strategy):
    if not callable(fn):
        raise TypeError(
            f"{entry}(fn=...) takes the replica step function; "
            f"received {fn!r} of type {type(fn).__name__}. Pass the function "
            f"you would give to strategy.run, e.g. {entry}(step, ...)."
        )
    if strategy is not None and not isinstance(strategy, tf.distribute.Strategy):
        raise TypeError(
            f"{entry}(strategy=...) takes a tf.distribute.Strategy; "
            f"received {strategy!r} of type {type(strategy).__name__}. Pass the "
            "strategy whose run() will call the step, or leave it out."
        )


def check_tpu_compatible(fn, *args, strategy=None, **kwargs) -> TPUCompatibilityReport:
    """Checks that `fn(*args, **kwargs)` compiles for a TPU, without running it.

    Args:
      fn: the replica step (a Python function or `tf.function`).
      *args: its positional arguments; tensors only give their shape and dtype.
      strategy: trace `fn` as `strategy.run(fn, args, kwargs)` would, in that
        strategy's replica context. Defaults to the strategy in scope, if any.
      **kwargs: its keyword arguments.

    Returns:
      A `TPUCompatibilityReport`: `.ok`, `.problems`, `.warnings`, `str()`.
    """
    _check_step_arguments("check_tpu_compatible", fn, strategy)
    if (
        strategy is None
        and tf.distribute.has_strategy()
        and (tf.distribute.in_cross_replica_context())
    ):
        strategy = tf.distribute.get_strategy()
    step, specs = _replica_step(fn, strategy, args, kwargs)
    name = getattr(fn, "__name__", type(fn).__name__)

    with _tracing():
        try:
            # Without autograph the ops keep the user's own frames (strategy.run
            # would otherwise run autograph's generated copy of `fn`, and the
            # source line is lost). Steps that need autograph are traced with it.
            concrete = tf.function(step, autograph=False).get_concrete_function(*specs)
        except Exception:  # pylint: disable=broad-except
            concrete = tf.function(step).get_concrete_function(*specs)
    walker = Walker()
    walker.walk_graph(concrete.graph)
    _check_returns(walker, concrete.graph, fn)

    if strategy is None or strategy.num_replicas_in_sync == 1:
        # A TPU step always sees static shapes (TPUStrategy's input pipeline pads
        # or drops the partial batch), so unknown dimensions compile as 1.
        with _tracing():
            message = compiling.compile_hlo(tf.function(step, jit_compile=True), _static(specs), {})
        compiled = message is None
        if message is not None:
            compiling.explain_compile_failure(walker, message, concrete.graph.name)
    else:
        message, compiled = None, None
    compiling.attach_messages(walker, message)
    if compiled is None:
        note = (
            f"not compiled as a whole: {strategy.num_replicas_in_sync} replicas span several "
            "devices; each flagged op was compiled alone"
        )
    else:
        note = message  # TF's error, or None when it compiled
    return TPUCompatibilityReport.of(name, walker.entries, compiled, note)


def ensure_tpu_compatible(fn, args=(), kwargs=None, strategy=None) -> TPUCompatibilityReport:
    """Raises `TPUCompatibilityError` unless `fn` compiles for a TPU.

    The strict-mode entry point: every problem is listed (with TF's own XLA
    message for the failing ops), and hazards become one
    `TPUPerformanceWarning`. Returns the report when there is no problem.
    """
    _check_step_arguments("ensure_tpu_compatible", fn, strategy)
    if not isinstance(args, (tuple, list)):
        raise TypeError(
            f"ensure_tpu_compatible(args=...) takes the step's positional arguments as a "
            f"tuple or list; received {args!r} of type {type(args).__name__}. Pass "
            f"args=(x,) for one argument."
        )
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(
            f"ensure_tpu_compatible(kwargs=...) takes the step's keyword arguments as a "
            f"dict or None; received {kwargs!r} of type {type(kwargs).__name__}."
        )
    report = check_tpu_compatible(fn, *tuple(args), strategy=strategy, **dict(kwargs or {}))
    errors.raise_or_warn(report, stacklevel=2)
    return report


def ensure_graph_compatible(graph_or_function) -> TPUCompatibilityReport:
    """`ensure_tpu_compatible` for an already traced graph or function."""
    report = check_graph(graph_or_function)
    errors.raise_or_warn(report, stacklevel=2)
    return report
