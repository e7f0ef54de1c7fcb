"""How a failed check surfaces: the TPU's own error type, and a warning for hazards.

`TPUCompatibilityError` is an `InvalidArgumentError`, as a TPU's compile failure is.
"""

from __future__ import annotations

import warnings

import tensorflow as tf

from compat_distribute.testing.xla_check import rules
from compat_distribute.testing.xla_check.report import TPUCompatibilityReport

TPU_DEVICE = "XLA_TPU_JIT"  # the device type a TPU compiles for, in TF's messages


def _unique(values):
    return list(dict.fromkeys(values))


def headline(report: TPUCompatibilityReport) -> str:
    """The first line of the error, worded as TF words it on a TPU, naming every failing op type."""
    unsupported = _unique(p.op_type for p in report.problems if p.kind != rules.XLA_COMPILE)
    if unsupported:
        return (
            f"Detected unsupported operations when trying to compile graph {report.function} "
            f"on {TPU_DEVICE}: {', '.join(unsupported)}"
        )
    failed = _unique(p.op_type for p in report.problems)
    return f"XLA cannot compile graph {report.function} on {TPU_DEVICE} at: {', '.join(failed)}"


class TPUCompatibilityError(tf.errors.InvalidArgumentError):
    """The replica step cannot run on a TPU as written.

    A `tf.errors.InvalidArgumentError`, as a TPU's compile failure is: code that
    handles the TPU's error handles this one. The message names every failing
    op (a TPU's names the first); `.report` holds the full
    `TPUCompatibilityReport`.
    """

    # Raised while a tf.function traces the step: autograph re-raises it as is
    # instead of wrapping it in a StagingError.
    ag_pass_through = True

    def __init__(self, report: TPUCompatibilityReport):
        # OpError pickles as `type(self)(*(getattr(self, a) for a in __init__'s
        # arguments))`: the report is all it needs.
        self.report = report
        super().__init__(
            None,
            None,
            f"{headline(report)}\n{report}\nFix every problem above, or move the offending "
            "ops out of the replica step (e.g. into the input pipeline or after "
            "strategy.run returns).",
        )


class TPUPerformanceWarning(UserWarning):
    """The step compiles for a TPU but will be slow there."""


def raise_or_warn(report: TPUCompatibilityReport, stacklevel: int):
    """Raises `TPUCompatibilityError` for problems, else warns once for hazards."""
    if not report.ok:
        raise TPUCompatibilityError(report)
    if report.warnings:
        warnings.warn(
            "\n".join(
                [f"{report.function}: compiles for a TPU, but:"] + ["  - " + str(w) for w in report.warnings]
            ),
            TPUPerformanceWarning,
            stacklevel=stacklevel + 1,
        )
