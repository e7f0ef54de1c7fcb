"""The smoke test: a table of TF1-style checks run through the shims.

`run_checks(target)` runs every check of `CHECKS` against one `Target` (a
strategy plus what the hardware promises: replica count, steps per run) and
returns a `Report`. The hardware is chosen by `choose_backend` (the harness's
one chooser, `testing._backend`; `gpus=True` lets "auto" pick local GPUs).
One module per concern:

    targets   `target(backend, steps_per_run)`: the strategy on the chosen hardware
    checks    the checks, and `CHECKS`, the table naming them (a new check is a row)
    run       `run_checks`, warnings caught per check, `Report`
    report    the text report
    progress  the TTY ticker

The command line is `compat_distribute.__main__`. Importing this package
imports TensorFlow.
"""

from compat_distribute.smoke.checks import CHECK_NAMES
from compat_distribute.smoke.checks import CHECKS
from compat_distribute.smoke.checks import Check
from compat_distribute.smoke.checks import CheckFailed
from compat_distribute.smoke.checks import Skip
from compat_distribute.smoke.progress import Progress
from compat_distribute.smoke.report import format_footer
from compat_distribute.smoke.report import format_header
from compat_distribute.smoke.report import format_report
from compat_distribute.smoke.report import format_result
from compat_distribute.smoke.run import Report
from compat_distribute.smoke.run import Result
from compat_distribute.smoke.run import run_checks
from compat_distribute.smoke.targets import Target
from compat_distribute.smoke.targets import target
from compat_distribute.smoke.targets import topologies
from compat_distribute.testing._backend import TPUUnreachableError
from compat_distribute.testing._backend import choose_backend
from compat_distribute.testing._fake_tpu.topologies import DEFAULT_TOPOLOGY
