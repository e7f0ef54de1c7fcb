"""What a TPU refuses or pays for, as data: the rules the walk applies to every op.

The first matching rule decides. No TensorFlow here.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re

# Kinds of entries, in the order a report lists them.
UNSUPPORTED_OP = "unsupported_op"
UNSUPPORTED_DTYPE = "unsupported_dtype"
XLA_COMPILE = "xla_compile"
DATA_DEPENDENT_SHAPE = "data_dependent_shape"
HOST_ROUND_TRIP = "host_round_trip"
PROBLEM_KINDS = (UNSUPPORTED_OP, UNSUPPORTED_DTYPE, XLA_COMPILE)  # the step fails on a TPU
WARNING_KINDS = (DATA_DEPENDENT_SHAPE, HOST_ROUND_TRIP)  # the step compiles, at a cost

# What a rule tests, besides the op's type (see `condition` for the words).
OP = "op"
FED_OFF_TPU = "fed_off_tpu"
NO_XLA_KERNEL = "no_xla_kernel"
XLA_KERNEL_REFUSES = "xla_kernel_refuses"
MAKES_OFF_TPU = "makes_off_tpu"
RETURNS_OFF_TPU = "returns_off_tpu"  # a value the step returns, not an op
COMPILE = "compile"  # the real XLA compile of the whole step, not a per-op test
TESTS = (OP, FED_OFF_TPU, NO_XLA_KERNEL, XLA_KERNEL_REFUSES, MAKES_OFF_TPU, RETURNS_OFF_TPU, COMPILE)
STEP_TESTS = (RETURNS_OFF_TPU, COMPILE)  # tests of the whole step, not of each op
_DTYPE_TESTS = (FED_OFF_TPU, MAKES_OFF_TPU, RETURNS_OFF_TPU)

# kTpuAllTypes (tensorflow/core/tpu/tpu_defs.h) less float64, plus the handle
# types a TPU computation passes around. Recent TF lists DT_DOUBLE there, but
# TPUs have no 64-bit float units (XLA emulates f64 at a large cost or refuses
# it, by generation) and TPU infeed refuses it (`_SUPPORTED_INFEED_DTYPES` in
# tpu/ops/tpu_ops.py); complex128 and string are not in the list at all.
TPU_DTYPES = frozenset(
    [
        "int32",
        "uint32",
        "float8_e4m3fn",
        "float8_e5m2",
        "float16",
        "bfloat16",
        "float32",
        "bool",
        "complex64",
        "int64",
        "uint64",
        "qint8",
        "quint8",
        "qint32",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "resource",
        "variant",
    ]
)

_MOVE_OUT = "move it out of the step (input pipeline, or after strategy.run returns)"
_ARGUMENTS = ("Placeholder", "_Arg", "_Retval")  # compiled without a kernel


@dataclasses.dataclass(frozen=True, eq=False)  # compared and hashed as objects: cheap cache keys
class Rule:
    """One row of the table.

    Attributes:
      name: what the rule is called in reports (`TPUProblem.rule`) and tests.
      test: what is tested besides the op's type: one of `TESTS`.
      kind: the entry the rule adds, or None when it accepts the op.
      why: what is wrong (or why the op is fine); `{op_type}` and `{dtypes}`
        are filled in.
      instead: what to do instead.
      ops: op types the rule applies to, as shell-style patterns.
      except_ops: op types it never applies to.
      dtypes: for the dtype tests, the only off-TPU dtypes it applies to
        (None: any).
      instead_for: `(op type, what to do)` pairs that replace `instead`.
    """

    name: str
    test: str
    kind: str | None
    why: str
    instead: str = ""
    ops: tuple[str, ...] = ("*",)
    except_ops: tuple[str, ...] = ()
    dtypes: frozenset[str] | None = None
    instead_for: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if self.test not in TESTS:
            raise ValueError(f"rule {self.name!r}: unknown test {self.test!r}")
        if self.dtypes is not None and self.test not in _DTYPE_TESTS:
            raise ValueError(f"rule {self.name!r}: dtypes only apply to the tests {_DTYPE_TESTS}")
        pattern = "|".join(fnmatch.translate(p) for p in self.ops)
        excluded = "|".join(fnmatch.translate(p) for p in self.except_ops) or "(?!)"
        object.__setattr__(self, "_ops", re.compile(pattern))
        object.__setattr__(self, "_except_ops", re.compile(excluded))

    def applies_to(self, op_type: str) -> bool:
        return bool(self._ops.match(op_type)) and not self._except_ops.match(op_type)

    def reason(self, op_type: str, dtypes=()) -> str:
        """The entry's `reason`: why, then what to do."""
        why = self.why.format(op_type=op_type, dtypes=", ".join(dtypes))
        instead = dict(self.instead_for).get(op_type, self.instead)
        return f"{why}; {instead}" if instead else why


RULES = (
    Rule(
        "host_round_trip",
        OP,
        HOST_ROUND_TRIP,
        "runs on the TPU host (outside compilation): a device-host round trip in every step",
        "keep it out of hot loops",
        ops=(
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
        ),
    ),
    Rule(
        "cross_replica",
        OP,
        None,
        "a TPUStrategy builds its own XLA collectives in place of these",
        ops=(
            "Collective*",
            "Nccl*",
            "CrossReplicaSum",
            "AllToAll",
            "XlaAllReduce",
            "XlaReduceScatter",
            "CollectivePermute",
        ),
    ),
    Rule(
        "python_callback",
        OP,
        UNSUPPORTED_OP,
        "a Python callback (tf.py_function / tf.numpy_function) has no XLA kernel and only "
        "runs in the process that traced it",
        "compute it with TF ops or move it out of the step",
        ops=("EagerPyFunc", "PyFunc", "PyFuncStateless"),
    ),
    Rule(
        "fed_off_tpu",
        FED_OFF_TPU,
        None,
        "reported once, where the dtype was made, not at the ops that carry it on (the rest "
        "of a float64 computation, its gradient, the function's output)",
    ),
    Rule(
        "no_xla_kernel",
        NO_XLA_KERNEL,
        UNSUPPORTED_OP,
        "XLA has no kernel for {op_type}; the TPU compile fails on it",
        _MOVE_OUT,
        except_ops=_ARGUMENTS,
    ),
    Rule(
        "xla_kernel_refuses_dtypes",
        XLA_KERNEL_REFUSES,
        UNSUPPORTED_OP,
        "XLA has kernels for {op_type}, but none for these dtypes; the TPU compile fails on it",
        _MOVE_OUT,
        except_ops=_ARGUMENTS,
    ),
    Rule(
        "string_constant",
        MAKES_OFF_TPU,
        None,
        "a string constant is dead weight XLA drops (an Assert's message); the ops that "
        "consume strings are flagged themselves",
        ops=("Const",),
        dtypes=frozenset(["string"]),
    ),
    Rule(
        "unsupported_dtype",
        MAKES_OFF_TPU,
        UNSUPPORTED_DTYPE,
        "produces {dtypes}, which the TPU does not support",
        "use float32/bfloat16 (or int32/int64) inside the step",
    ),
    Rule(
        "data_dependent_shape",
        OP,
        DATA_DEPENDENT_SHAPE,
        "output shape depends on the data: a TPU pads it to a bound or recompiles",
        "prefer ops whose output shape is static",
        ops=(
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
        ),
        instead_for=(
            ("Where", "for tf.boolean_mask, keep the shape with tf.where(mask, x, 0) and a masked reduction"),
            ("Unique", "for tf.unique, count with tf.math.bincount(x, minlength=n, maxlength=n) over a known range"),
        ),
    ),
    Rule(
        "returns_string",
        RETURNS_OFF_TPU,
        UNSUPPORTED_DTYPE,
        "the step returns a {dtypes} tensor (a Python str the step returns becomes one), and a "
        "TPU step can return only numbers and bools",
        "return numbers (or nothing) from the step, and make the text after strategy.run returns",
        dtypes=frozenset(["string"]),
    ),
    Rule(
        "xla_compile",
        COMPILE,
        XLA_COMPILE,
        "XLA cannot compile the step",
        "make shapes static (compile-time constants) around this op",
    ),
)

def rule(name: str) -> Rule:
    """The rule called `name` (looked up in `RULES` each time: the table is the one place)."""
    for candidate in RULES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no XLA check rule is called {name!r}; the rules are {[r.name for r in RULES]}")


# ------------------------------------------------------ docs/xla-check.md


def _ops_text(rule_: Rule) -> str:
    if rule_.ops == ("*",):
        text = "any op"
    else:
        text = ", ".join(f"`{op}`" for op in rule_.ops)
    if rule_.except_ops:
        text += " but " + ", ".join(f"`{op}`" for op in rule_.except_ops)
    return text


def condition(rule_: Rule) -> str:
    """When the rule applies, in words."""
    ops = _ops_text(rule_)
    off_tpu = ", ".join(f"`{d}`" for d in sorted(rule_.dtypes)) if rule_.dtypes else "a dtype the TPU lacks"
    return {
        OP: ops,
        FED_OFF_TPU: f"{ops} with an input of a dtype the TPU lacks",
        NO_XLA_KERNEL: f"{ops} that XLA has no kernel for",
        XLA_KERNEL_REFUSES: f"{ops} whose XLA kernels all refuse its dtypes",
        MAKES_OFF_TPU: f"{ops} with an output of {off_tpu} (calls, `cond` and `while` excepted: "
        "their bodies are walked)",
        RETURNS_OFF_TPU: f"a value of {off_tpu} that the step returns, made where no rule above "
        "reports it",
        COMPILE: "the real XLA compile of the step fails where no rule above explains it",
    }[rule_.test]


def readme_table() -> str:
    """docs/xla-check.md's table of what the check catches, as Markdown."""
    lines = [
        "| rule | applies to | reported as | why | what to do |",
        "|---|---|---|---|---|",
    ]
    for rule_ in RULES:
        if rule_.kind is None:
            as_ = "accepted"
        else:
            as_ = f"{'problem' if rule_.kind in PROBLEM_KINDS else 'warning'} (`{rule_.kind}`)"
        off_tpu = ", ".join(f"`{d}`" for d in sorted(rule_.dtypes or ())) or "`float64`, `complex128`, `string`, ..."
        why = rule_.why.format(op_type="the op", dtypes=off_tpu)
        todo = "; ".join([rule_.instead] + [f"`{op}`: {text}" for op, text in rule_.instead_for])
        lines.append(f"| `{rule_.name}` | {condition(rule_)} | {as_} | {why} | {todo.strip('; ')} |")
    lines.append("")
    lines.append("TPU dtypes: " + ", ".join(f"`{d}`" for d in sorted(TPU_DTYPES)) + ".")
    return "\n".join(lines)
