"""Check a replica step for what a TPU cannot compile, on an ordinary CPU.

A TPU compiles every replica step with XLA. A step that runs on a
MirroredStrategy can still fail on a TPU, and only once the TPU is booked:
an op XLA has no kernel for, or a dtype the TPU lacks. `check_tpu_compatible`
finds these on the CPU, without running the step.

How it works
------------
1. Trace. The step is traced into a `FuncGraph` and never run. With no
   strategy (and none in scope) `fn` is traced alone under the default
   strategy, whose replica context makes `all_reduce` an identity. With a
   strategy, `strategy.run(fn, args, kwargs)` is traced inside a
   `tf.function`, so `fn` runs in that strategy's own replica context and
   `all_reduce` / `all_gather` / `merge_call` build the strategy's real
   cross-replica ops. Tensor arguments become `tf.TensorSpec`s first, so no
   value is constant-folded into the graph.
2. Walk. Every op of the graph is visited, and of every function it calls
   (`cond`/`while` branches and bodies, nested `tf.function`s, found through
   the function-valued attrs of each op and looked up in the graph's function
   library). XLA's compiler stops at the first unsupported op; the walk finds
   all of them. Each op is checked against:
   * XLA's kernel table for the CPU JIT device. XLA registers its kernels as
     device type "XLA_CPU_JIT" the first time anything is compiled, so one
     trivial jit compile fills the table, read once through
     `kernels.get_all_registered_kernels()`. An op is compilable when one of
     its kernels accepts the op's type attrs (kernel constraints).
   * The TPU dtype set: TF's `kTpuAllTypes` (tensorflow/core/tpu/tpu_defs.h)
     without float64, plus resource and variant handles. Recent TF lists
     DT_DOUBLE there, but TPUs have no 64-bit float units (XLA emulates f64
     at a large cost or refuses it, depending on the TPU generation) and TPU
     infeed refuses it (`_SUPPORTED_INFEED_DTYPES` in tpu/ops/tpu_ops.py), so
     float64 is treated as unsupported; complex128 and string are not in the
     list at all.
   * Hazards that compile but cost on a TPU (warnings, see below).
   Cross-replica ops are collective ops (CollectiveReduceV2, NcclAllReduce,
   CrossReplicaSum, ...) that a TPUStrategy replaces by its own XLA
   all-reduce; they are treated as supported whatever the kernel table says.
3. Compile. The replica computation is really compiled with
   `tf.function(..., jit_compile=True).experimental_get_compiler_ir(...)(
   stage="hlo")`, which compiles to HLO and runs nothing. This catches what
   the walk cannot see (shapes that must be compile-time constants) and gives
   TF's own error text. It is done when the replica computation lives on one
   device (no strategy, or a strategy with one replica); with several
   replicas the traced graph spans devices and XLA cannot compile it as one
   cluster, so each op the walk flags is compiled alone instead, to get TF's
   message for it.

Errors and warnings
-------------------
Problems (`report.problems`, `report.ok` is False):
* an op with no XLA kernel (string ops, `tf.py_function`,
  `tf.numpy_function`). With soft device placement a TPUStrategy may move
  such an op to the host ("automatic outside compilation"), but only when
  its inputs and outputs are TPU types and it never feeds device-side
  control flow; a Python callback additionally only runs in the process that
  traced it, which is not where a remote TPU worker runs the step. The
  portable fix is the same in all cases: move the op out of the step.
* a tensor of a dtype the TPU lacks (float64, complex128, string, ...).
* an XLA compile failure the walk did not explain (TF's message).
Warnings (`report.warnings`; the step compiles):
* output shapes that depend on the data (Where, which `tf.boolean_mask`
  uses, Unique, DynamicPartition, ...): a TPU pads them to a bound or
  recompiles.
* host round trips TPUStrategy is designed to take (tf.print, summaries):
  outside compilation inside every step.

Strict mode: `ensure_tpu_compatible` raises `TPUCompatibilityError` listing
every problem and emits one `TPUPerformanceWarning` for the hazards;
`check_graph` checks an already traced `FuncGraph` / `ConcreteFunction`
without tracing it again.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
import sys
import sysconfig
import threading
import warnings

import tensorflow as tf
from tensorflow.python.framework import dtypes as _dtypes

__all__ = [
    "TPUCompatibilityError",
    "TPUCompatibilityReport",
    "TPUPerformanceWarning",
    "TPUProblem",
    "check_graph",
    "check_tpu_compatible",
    "ensure_graph_compatible",
    "ensure_tpu_compatible",
]

# Kinds of entries, in the order a report lists them.
UNSUPPORTED_OP = "unsupported_op"
UNSUPPORTED_DTYPE = "unsupported_dtype"
XLA_COMPILE = "xla_compile"
DATA_DEPENDENT_SHAPE = "data_dependent_shape"
HOST_ROUND_TRIP = "host_round_trip"

# kTpuAllTypes (tensorflow/core/tpu/tpu_defs.h) less DT_DOUBLE (see module
# docstring), plus the handle types a TPU computation passes around.
TPU_DTYPES = frozenset(
    [
        _dtypes.int32,
        _dtypes.uint32,
        _dtypes.float8_e4m3fn,
        _dtypes.float8_e5m2,
        _dtypes.float16,
        _dtypes.bfloat16,
        _dtypes.float32,
        _dtypes.bool,
        _dtypes.complex64,
        _dtypes.int64,
        _dtypes.uint64,
        _dtypes.qint8,
        _dtypes.quint8,
        _dtypes.qint32,
        _dtypes.int8,
        _dtypes.uint8,
        _dtypes.int16,
        _dtypes.uint16,
        _dtypes.resource,
        _dtypes.variant,
    ]
)

# Ops whose output shape depends on the values of their inputs.
DATA_DEPENDENT_SHAPE_OPS = frozenset(
    [
        "Where",
        "Unique",
        "UniqueV2",
        "UniqueWithCounts",
        "UniqueWithCountsV2",
        "DynamicPartition",
        "ListDiff",
        "NonMaxSuppression",
        "NonMaxSuppressionV2",
        "NonMaxSuppressionV3",
        "NonMaxSuppressionV4",
        "NonMaxSuppressionV5",
        "DenseToDenseSetOperation",
        "DenseToSparseSetOperation",
    ]
)

_FIXED_SHAPE_HINTS = {
    "Where": "for tf.boolean_mask, keep the shape with tf.where(mask, x, 0) "
    "and a masked reduction",
    "Unique": "for tf.unique, count with tf.math.bincount(x, minlength=n, "
    "maxlength=n) over a known range",
}

# Host-side ops TPUStrategy moves out of the compiled step on purpose.
HOST_OPS = frozenset(
    [
        "PrintV2",
        "Print",
        "StringFormat",
        "WriteScalarSummary",
        "WriteSummary",
        "WriteHistogramSummary",
        "WriteImageSummary",
        "WriteAudioSummary",
        "WriteRawProtoSummary",
        "FlushSummaryWriter",
    ]
)

# Python callbacks: no XLA kernel and bound to the tracing process.
PY_CALLBACK_OPS = frozenset(["EagerPyFunc", "PyFunc", "PyFuncStateless"])

# Ops XLA compiles without a kernel: function arguments and captures.
_STRUCTURAL_OPS = frozenset(["Placeholder", "_Arg", "_Retval"])

# Cross-replica ops: a TPUStrategy builds its own XLA collectives instead.
_COLLECTIVE_OP = re.compile(
    r"^(Collective\w*|Nccl\w*|CrossReplicaSum|AllToAll|XlaAllReduce|"
    r"XlaReduceScatter|CollectivePermute)$"
)

_XLA_DEVICE = "XLA_CPU_JIT"

# MirroredStrategy names each replica's copy of an op "replica_<i>/<name>".
_REPLICA_PREFIX = re.compile(r"^replica_\d+/")


@dataclasses.dataclass(frozen=True)
class TPUProblem:
    """One op a TPU cannot run as written, or runs at a cost.

    Attributes:
      kind: one of "unsupported_op", "unsupported_dtype", "xla_compile",
        "data_dependent_shape", "host_round_trip".
      op_type: the op's type, e.g. "AsString".
      op_name: the op's name in its graph.
      function: the name of the graph or function holding the op.
      filename: the user's file that created the op (None when TF recorded no
        traceback, e.g. for a graph loaded from a SavedModel).
      lineno: the line in `filename`.
      reason: what is wrong and what to do.
      tf_message: TF's own XLA error for this op, when compiling gave one.
    """

    kind: str
    op_type: str
    op_name: str
    function: str
    filename: str | None
    lineno: int | None
    reason: str
    tf_message: str | None = None

    @property
    def source(self) -> str | None:
        """`file:line` of the user's code that created the op, or None."""
        if self.filename is None:
            return None
        return f"{self.filename}:{self.lineno}"

    def __str__(self) -> str:
        where = self.source or f"op {self.op_name!r} in {self.function}"
        text = f"{where}: {self.op_type} ({self.op_name}): {self.reason}"
        if self.tf_message:
            text += "\n    TF: " + self.tf_message.replace("\n", "\n        ")
        return text


@dataclasses.dataclass(frozen=True)
class TPUCompatibilityReport:
    """What `check_tpu_compatible` / `check_graph` found.

    Attributes:
      function: the name of the checked function.
      problems: entries that make the step fail on a TPU.
      warnings: entries that compile but cost on a TPU.
      compiled: True when the whole replica computation compiled with XLA,
        False when it did not, None when it was not compiled as a whole.
      compile_message: TF's error when `compiled` is False, or why the whole
        computation was not compiled when `compiled` is None.
    """

    function: str
    problems: tuple[TPUProblem, ...]
    warnings: tuple[TPUProblem, ...]
    compiled: bool | None = None
    compile_message: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            head = f"{self.function}: TPU compatible"
        else:
            head = f"{self.function}: {len(self.problems)} TPU problem(s)"
        lines = [head + (f", {len(self.warnings)} warning(s)" if self.warnings else "")]
        for title, entries in (("problems", self.problems), ("warnings", self.warnings)):
            if entries:
                lines.append(f"  {title}:")
                lines.extend("  - " + str(e).replace("\n", "\n    ") for e in entries)
        if (
            self.compiled is False
            and self.problems
            and not any(p.tf_message for p in self.problems)
        ):
            lines.append("  XLA: " + (self.compile_message or ""))
        return "\n".join(lines)


class TPUCompatibilityError(ValueError):
    """The replica step cannot run on a TPU as written.

    A ValueError: the step function handed to the strategy is of the right
    type but its value (what it computes) is unusable, and TF's own XLA
    compile errors surface as ValueError from `experimental_get_compiler_ir`.
    `.report` holds the full `TPUCompatibilityReport`.
    """

    # Raised while a tf.function traces the step: autograph re-raises it as is
    # instead of wrapping it in a StagingError.
    ag_pass_through = True

    def __init__(self, report: TPUCompatibilityReport):
        self.report = report
        super().__init__(
            f"{report}\nFix every problem above, or move the offending ops out "
            "of the replica step (e.g. into the input pipeline or after "
            "strategy.run returns)."
        )


class TPUPerformanceWarning(UserWarning):
    """The step compiles for a TPU but will be slow there."""


# ---------------------------------------------------------------- the table


_table_lock = threading.Lock()


@functools.cache
def _xla_kernels() -> dict:
    """op type -> XLA_CPU_JIT KernelDefs; fills TF's table on first use."""
    from tensorflow.python.framework import kernels  # pylint: disable=g-import-not-at-top

    with _table_lock:
        # XLA registers its compilation kernels the first time it compiles.
        tf.function(lambda x: x + 1, jit_compile=True).experimental_get_compiler_ir(
            tf.TensorSpec([], tf.float32)
        )(stage="hlo")
        table: dict = {}
        for kernel in kernels.get_all_registered_kernels().kernel:
            if kernel.device_type == _XLA_DEVICE:
                table.setdefault(kernel.op, []).append(kernel)
        return table


def _kernel_accepts(kernel, attrs) -> bool:
    for constraint in kernel.constraint:
        allowed = set(constraint.allowed_values.list.type)
        value = attrs.get(constraint.name)
        if value is None:
            continue
        if value.HasField("list"):
            types = list(value.list.type)
        elif value.HasField("type"):
            types = [value.type]
        else:
            continue
        if any(t not in allowed for t in types):
            return False
    return True


def _has_xla_kernel(op_type: str, attrs) -> bool:
    return any(_kernel_accepts(k, attrs) for k in _xla_kernels().get(op_type, ()))


# ------------------------------------------------------------ source lines


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """Directories whose frames are never the user's line."""
    roots = [sysconfig.get_paths()["stdlib"]]
    for name in ("tensorflow", "keras", "tf_keras", "compat_distribute"):
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None)
        if origin is None:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec else None
        if origin:
            roots.append(os.path.dirname(os.path.realpath(origin)))
    return tuple(os.path.join(r, "") for r in roots)


@functools.lru_cache(maxsize=4096)
def _real(filename: str) -> str:
    return os.path.realpath(filename)


def _user_frame(op) -> tuple[str | None, int | None]:
    """The innermost frame of the op's creation outside TF and this package."""
    try:
        frames = op.traceback
    except (AttributeError, ValueError):
        return None, None
    roots = _library_roots()
    for frame in reversed(list(frames or ())):
        filename = frame.filename
        base = os.path.basename(filename)
        if base.startswith("__autograph_generated_file"):
            continue
        if _real(filename).startswith(roots):
            continue
        return filename, frame.lineno
    return None, None


# ------------------------------------------------------------------ the walk


def _function_names(attrs):
    for value in attrs.values():
        if value.HasField("func"):
            yield value.func.name
        elif value.HasField("list"):
            for func in value.list.func:
                yield func.name


def _lookup_function(graphs, name):
    for graph in graphs:
        get = getattr(graph, "_get_function", None)
        found = get(name) if get else None
        if found is not None:
            return found
    return None


def _type_attr_dtypes(attrs):
    for value in attrs.values():
        if value.HasField("type"):
            yield tf.as_dtype(value.type)
        elif value.HasField("list"):
            for t in value.list.type:
                yield tf.as_dtype(t)


class _Walker:
    """Visits every op of a graph and of every function it calls, once."""

    def __init__(self):
        self.entries: list[TPUProblem] = []
        self._seen_keys: set = set()
        self._seen_functions: set = set()
        self.ops: dict = {}  # op name -> Operation, for TF's messages
        self.problem_ops: dict = {}  # entry index -> Operation, for compiling

    def walk_graph(self, graph, outer=()):
        graphs = (graph,) + tuple(outer)
        for op in graph.get_operations():
            self.ops.setdefault(op.name, op)
            attrs = op.node_def.attr
            out_dtypes = [t.dtype for t in op.outputs]
            in_dtypes = [t.dtype for t in op.inputs]
            if op.type == "Placeholder" and outer:
                continue  # A called function's argument: checked where it is made.
            called = list(_function_names(attrs))
            filename, lineno = _user_frame(op)
            self._check(
                op.type,
                op.name,
                graph.name,
                attrs,
                out_dtypes,
                filename,
                lineno,
                op=op,
                in_dtypes=in_dtypes,
                calls=bool(called),
            )
            for name in called:
                self._walk_function(name, graphs)

    def _walk_function(self, name, graphs):
        if name in self._seen_functions:
            return
        self._seen_functions.add(name)
        function = _lookup_function(graphs, name)
        if function is None:
            return
        body = getattr(function, "graph", None)
        if body is not None:
            self.walk_graph(body, graphs)
            return
        # No FuncGraph (e.g. a loaded SavedModel): walk the FunctionDef, no lines.
        definition = function.definition
        for node in definition.node_def:
            called = list(_function_names(node.attr))
            self._check(
                node.op,
                node.name,
                name,
                node.attr,
                list(_type_attr_dtypes(node.attr)),
                None,
                None,
                calls=bool(called),
            )
            for inner in called:
                self._walk_function(inner, graphs)

    def _add(self, kind, op_type, op_name, function, filename, lineno, reason, key, op=None):
        if key in self._seen_keys:
            return
        self._seen_keys.add(key)
        self.entries.append(TPUProblem(kind, op_type, op_name, function, filename, lineno, reason))
        if op is not None:
            self.problem_ops[len(self.entries) - 1] = op

    def _check(
        self,
        op_type,
        op_name,
        function,
        attrs,
        out_dtypes,
        filename,
        lineno,
        op=None,
        in_dtypes=(),
        calls=False,
    ):
        # Only the op that brings a non-TPU dtype in is reported: ops fed with it
        # (the rest of a float64 computation, its gradient, the function's
        # output Identity) are reported where it was made.
        inherited = {d for d in in_dtypes if d not in TPU_DTYPES}
        # Without a source line, fall back to the op itself for the dedup key;
        # the copies a multi-replica strategy makes of it (replica_1/..., ...)
        # are one problem.
        where = (filename, lineno) if filename else (function, _REPLICA_PREFIX.sub("", op_name))
        if op_type in HOST_OPS:
            self._add(
                HOST_ROUND_TRIP,
                op_type,
                op_name,
                function,
                filename,
                lineno,
                "runs on the TPU host (outside compilation): a device-host "
                "round trip in every step; keep it out of hot loops",
                (HOST_ROUND_TRIP, op_type, where),
            )
            return
        if _COLLECTIVE_OP.match(op_type):
            return  # TPUStrategy builds its own XLA collectives.
        if op_type in PY_CALLBACK_OPS:
            self._add(
                UNSUPPORTED_OP,
                op_type,
                op_name,
                function,
                filename,
                lineno,
                "a Python callback (tf.py_function / tf.numpy_function) has "
                "no XLA kernel and only runs in the process that traced it; "
                "compute it with TF ops or move it out of the step",
                (UNSUPPORTED_OP, op_type, where),
                op,
            )
            return
        if inherited:
            return  # Fed a non-TPU dtype: reported where that was made.
        if op_type not in _STRUCTURAL_OPS and not _has_xla_kernel(op_type, attrs):
            known = op_type in _xla_kernels()
            reason = (
                f"XLA has a {op_type} kernel, but not for these dtypes"
                if known
                else f"XLA has no kernel for {op_type}"
            )
            self._add(
                UNSUPPORTED_OP,
                op_type,
                op_name,
                function,
                filename,
                lineno,
                reason + "; the TPU compile fails on it. Move it out of the "
                "step (input pipeline, or after strategy.run returns)",
                (UNSUPPORTED_OP, op_type, where),
                op,
            )
            return
        # A call, cond or loop returns what its body makes: the body is walked.
        bad = [] if calls else sorted({d.name for d in out_dtypes if d not in TPU_DTYPES})
        # A string Const is dead weight XLA drops (Assert messages); ops that
        # consume strings are flagged themselves.
        if bad and not (op_type == "Const" and bad == ["string"]):
            self._add(
                UNSUPPORTED_DTYPE,
                op_type,
                op_name,
                function,
                filename,
                lineno,
                f"produces {', '.join(bad)}, which the TPU does not support; "
                "use float32/bfloat16 (or int32/int64) inside the step",
                (UNSUPPORTED_DTYPE, tuple(bad), where),
            )
            return
        if op_type in DATA_DEPENDENT_SHAPE_OPS:
            self._add(
                DATA_DEPENDENT_SHAPE,
                op_type,
                op_name,
                function,
                filename,
                lineno,
                "output shape depends on the data: a TPU pads it to a bound "
                "or recompiles; "
                + _FIXED_SHAPE_HINTS.get(op_type, "prefer ops whose output shape is static"),
                (DATA_DEPENDENT_SHAPE, op_type, where),
            )


# ---------------------------------------------------------- TF's messages


_UNSUPPORTED_TEXT = re.compile(r"Detected unsupported operations")
_UNREGISTERED_TEXT = re.compile(r"No registered '(\w+)' OpKernel")
_NODE_TEXT = re.compile(r"\{\{node ([^}]+)\}\}|node `([^`]+)`")


def _xla_error_text(error: Exception) -> str:
    text = str(error)
    prefix = "Failed getting HLO text: '"
    if text.startswith(prefix):
        text = text[len(prefix) :].rstrip("'")
    # The stack TF appends is where this check rebuilt the op, not the user's line.
    return text.split("The op is created at:")[0].strip()


def _compile(function, args, kwargs) -> str | None:
    """Compiles to HLO; returns TF's error text, or None when it compiles."""
    try:
        function.experimental_get_compiler_ir(*args, **kwargs)(stage="hlo")
    except (ValueError, tf.errors.OpError) as e:
        return _xla_error_text(e)
    return None


_op_message_cache: dict = {}


def _single_op_message(op) -> str | None:
    """TF's XLA error for `op` compiled alone (placeholder inputs)."""
    key = (
        op.type,
        tuple(t.dtype for t in op.inputs),
        op.node_def.attr.__repr__() if op.type not in PY_CALLBACK_OPS else "",
    )
    if key in _op_message_cache:
        return _op_message_cache[key]
    specs = [tf.TensorSpec(t.shape, t.dtype) for t in op.inputs]
    out_dtypes = [t.dtype for t in op.outputs]
    attrs = {k: v for k, v in op.node_def.attr.items()}

    def alone(*inputs):
        graph = tf.compat.v1.get_default_graph()
        return graph.create_op(op.type, list(inputs), out_dtypes, attrs=attrs, name=op.type).outputs

    try:
        message = _compile(tf.function(alone, jit_compile=True), specs, {})
    except Exception:  # pylint: disable=broad-except
        message = None  # An op that cannot be rebuilt alone: no TF text.
    _op_message_cache[key] = message
    return message


def _attach_messages(walker: _Walker, whole_message: str | None):
    """Gives each unsupported op TF's own message."""
    for index, entry in enumerate(walker.entries):
        if entry.kind != UNSUPPORTED_OP:
            continue
        op = walker.problem_ops.get(index)
        message = None
        if whole_message and re.search(rf"\b{re.escape(entry.op_type)} \(", whole_message):
            message = whole_message
        elif op is not None:
            message = _single_op_message(op)
        if message:
            walker.entries[index] = dataclasses.replace(entry, tf_message=message)


def _explain_compile_failure(walker: _Walker, message: str, function: str):
    """Adds the whole-compile failure when no walked entry accounts for it."""
    if _UNSUPPORTED_TEXT.search(message):
        named = set(_UNREGISTERED_TEXT.findall(message))
        accounted = {e.op_type for e in walker.entries} | HOST_OPS
        if named and named <= accounted:
            return  # Already an entry (or a host op TPUStrategy outside-compiles).
    op_name = op_type = None
    filename = lineno = None
    match = _NODE_TEXT.search(message)
    if match:
        op_name = match.group(1) or match.group(2)
        op = walker.ops.get(op_name)
        if op is not None:
            op_type = op.type
            filename, lineno = _user_frame(op)
    walker.entries.append(
        TPUProblem(
            XLA_COMPILE,
            op_type or "?",
            op_name or "?",
            function,
            filename,
            lineno,
            "XLA cannot compile the step; make shapes static (compile-"
            "time constants) around this op",
            tf_message=message,
        )
    )


# ------------------------------------------------------------- public API


def _report(function_name, walker, compiled=None, compile_message=None):
    problems = tuple(
        e for e in walker.entries if e.kind in (UNSUPPORTED_OP, UNSUPPORTED_DTYPE, XLA_COMPILE)
    )
    hazards = tuple(e for e in walker.entries if e.kind in (DATA_DEPENDENT_SHAPE, HOST_ROUND_TRIP))
    return TPUCompatibilityReport(function_name, problems, hazards, compiled, compile_message)


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
    walker = _Walker()
    walker.walk_graph(graph)
    if compile_ops:
        _attach_messages(walker, None)
    return _report(
        graph.name, walker, None, "not compiled as a whole: check_graph walks a traced graph"
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
    if not callable(fn):
        raise TypeError(
            f"check_tpu_compatible(fn=...) takes the replica step function; "
            f"received {fn!r} of type {type(fn).__name__}. Pass the function "
            "you would give to strategy.run, e.g. check_tpu_compatible(step, x)."
        )
    if strategy is not None and not isinstance(strategy, tf.distribute.Strategy):
        raise TypeError(
            "check_tpu_compatible(strategy=...) takes a tf.distribute.Strategy; "
            f"received {strategy!r} of type {type(strategy).__name__}. Pass the "
            "strategy whose run() will call the step, or leave it out."
        )
    if (
        strategy is None
        and tf.distribute.has_strategy()
        and (tf.distribute.in_cross_replica_context())
    ):
        strategy = tf.distribute.get_strategy()
    step, specs = _replica_step(fn, strategy, args, kwargs)
    name = getattr(fn, "__name__", type(fn).__name__)

    try:
        # Without autograph the ops keep the user's own frames (strategy.run
        # would otherwise run autograph's generated copy of `fn`, and the
        # source line is lost). Steps that need autograph are traced with it.
        concrete = tf.function(step, autograph=False).get_concrete_function(*specs)
    except Exception:  # pylint: disable=broad-except
        concrete = tf.function(step).get_concrete_function(*specs)
    walker = _Walker()
    walker.walk_graph(concrete.graph)

    if strategy is None or strategy.num_replicas_in_sync == 1:
        # A TPU step always sees static shapes (TPUStrategy's input pipeline pads
        # or drops the partial batch), so unknown dimensions compile as 1.
        message = _compile(tf.function(step, jit_compile=True), _static(specs), {})
        compiled = message is None
        if message is not None:
            _explain_compile_failure(walker, message, concrete.graph.name)
    else:
        message, compiled = None, None
    _attach_messages(walker, message)
    note = (
        message
        if compiled is False
        else (
            None
            if compiled
            else f"not compiled as a whole: {strategy.num_replicas_in_sync} replicas "
            "span several devices; each flagged op was compiled alone"
        )
    )
    return _report(name, walker, compiled, note)


def _raise_or_warn(report: TPUCompatibilityReport, stacklevel: int):
    if not report.ok:
        raise TPUCompatibilityError(report)
    if report.warnings:
        warnings.warn(
            "\n".join(
                [f"{report.function}: compiles for a TPU, but:"]
                + ["  - " + str(w) for w in report.warnings]
            ),
            TPUPerformanceWarning,
            stacklevel=stacklevel,
        )


def ensure_tpu_compatible(fn, args=(), kwargs=None, strategy=None) -> TPUCompatibilityReport:
    """Raises `TPUCompatibilityError` unless `fn` compiles for a TPU.

    The strict-mode entry point: every problem is listed (with TF's own XLA
    message for the failing ops), and hazards become one
    `TPUPerformanceWarning`. Returns the report when there is no problem.
    """
    report = check_tpu_compatible(fn, *tuple(args), strategy=strategy, **dict(kwargs or {}))
    _raise_or_warn(report, stacklevel=3)
    return report


def ensure_graph_compatible(graph_or_function) -> TPUCompatibilityReport:
    """`ensure_tpu_compatible` for an already traced graph or function."""
    report = check_graph(graph_or_function)
    _raise_or_warn(report, stacklevel=3)
    return report
