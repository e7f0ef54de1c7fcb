"""Check a replica step for what a TPU cannot compile, on an ordinary CPU.

A step that runs on a MirroredStrategy can still fail on a TPU, once it is booked.
Trace, walk, compile, report: docs/design.md.
"""

from compat_distribute import _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    {
        "compat_distribute.testing.xla_check.check": (
            "check_graph",
            "check_tpu_compatible",
            "ensure_graph_compatible",
            "ensure_tpu_compatible",
        ),
        "compat_distribute.testing.xla_check.errors": ("TPUCompatibilityError", "TPUPerformanceWarning"),
        "compat_distribute.testing.xla_check.report": ("TPUCompatibilityReport", "TPUProblem"),
    },
)
