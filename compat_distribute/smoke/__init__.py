"""The smoke test: a table of TF1-style checks run through the shims.

One module per concern; the table and topology names import no TensorFlow.
"""

from compat_distribute import _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    {
        "compat_distribute.smoke.table": ("CHECKS", "Check", "topologies"),
        "compat_distribute.smoke.checks": ("CheckFailed", "Skip"),
        "compat_distribute.smoke.progress": ("Progress",),
        "compat_distribute.smoke.report": (
            "format_footer",
            "format_header",
            "format_report",
            "format_result",
        ),
        "compat_distribute.smoke.run": ("Report", "Result", "run_checks"),
        "compat_distribute.smoke.targets": ("Target", "target"),
        "compat_distribute.testing._backend": ("TPUUnreachableError", "choose_backend"),
        "compat_distribute.testing._fake_tpu.topologies": ("DEFAULT_TOPOLOGY",),
    },
)
