"""The smoke test: a table of TF1-style checks run through the shims.

`run_checks(target)` runs every check of `CHECKS` against one `Target` (a
strategy plus what the hardware promises: replica count, steps per run) and
returns a `Report`. The hardware is chosen by `choose_backend` (the harness's
one chooser, `testing._backend`; `gpus=True` lets "auto" pick local GPUs).
One module per concern:

    targets   `target(backend, steps_per_run)`: the strategy on the chosen hardware
    table     `CHECKS`, the table naming the checks (a new check is a row); no TensorFlow
    checks    the checks themselves
    run       `run_checks`, warnings caught per check, `Report`
    report    the text report
    progress  the TTY ticker

The command line is `cli` (`compat-distribute smoke`). Each name below is imported
from its module on first use: the table and the topology names import no
TensorFlow, the checks and targets do.
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
