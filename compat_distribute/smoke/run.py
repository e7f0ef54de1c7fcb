"""Running the checks: `run_checks(target)` returns a `Report`.

The deprecation warnings the TF1-style calls raise are caught and reported once.
"""

import contextlib
import dataclasses
import logging
import re
import time
import warnings

from compat_distribute.smoke import checks as checks_lib
from compat_distribute.smoke import table as table_lib
from compat_distribute.smoke import progress as progress_lib


@dataclasses.dataclass
class Result:
    name: str
    ok: bool
    detail: str
    seconds: float
    skipped: bool = False

    def as_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Report:
    device: str
    replicas: int
    steps_per_run: int
    results: list
    seconds: float
    steps_per_second: float | None = None
    deprecations: list = dataclasses.field(default_factory=list)
    other_warnings: list = dataclasses.field(default_factory=list)
    info: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self):
        return all(r.ok for r in self.results)

    @property
    def failures(self):
        return [r for r in self.results if not r.ok]

    def as_dict(self):
        return {
            "ok": self.ok,
            "device": self.device,
            "replicas": self.replicas,
            "steps_per_run": self.steps_per_run,
            "checks": [r.as_dict() for r in self.results],
            "steps_per_second": self.steps_per_second,
            "seconds": round(self.seconds, 3),
            "deprecation_warnings": self.deprecations,
            "other_warnings": self.other_warnings,
            **self.info,
        }


def one_line(text, limit=300):
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _run_one(check, target, measured):
    """(detail, ok, skipped) of one check; never raises."""
    try:
        return check.run(target, measured), True, False
    except checks_lib.Skip as e:
        return f"skipped: {e}", True, True
    except checks_lib.CheckFailed as e:
        return str(e), False, False
    except Exception as e:  # pylint: disable=broad-except
        return one_line(f"{type(e).__name__}: {e}"), False, False


def run_checks(target, *, inject_failure=None, progress=None, on_start=None, on_result=None):
    """Runs `CHECKS` against `target`; returns a `Report`.

    `inject_failure` names a check whose result is turned into a failure after
    it ran (to test the failure path end to end). `progress` (a `Progress`)
    ticks while each check runs. `on_start(name)` and `on_result(result)` are
    called around each check, for printing results as they come.
    """
    table = table_lib.CHECKS  # read here, so a row added to the table is run
    names = [check.name for check in table]
    if inject_failure is not None and inject_failure not in names:
        raise ValueError(
            f"inject_failure must be one of {', '.join(names)}; got {inject_failure!r}."
        )
    progress = progress or progress_lib.Silent()
    results, measured, deprecations, other_warnings = [], {}, {}, {}
    started = time.perf_counter()
    for index, check in enumerate(table):
        if on_start is not None:
            on_start(check.name)
        progress.start(f"[{index + 1}/{len(table)}] {check.name}")
        t0 = time.perf_counter()
        with captured_warnings() as caught:
            detail, ok, skipped = _run_one(check, target, measured)
        seconds = time.perf_counter() - t0
        progress.stop()
        for deprecation, message in caught:
            (deprecations if deprecation else other_warnings).setdefault(message, None)
        if check.name == inject_failure:
            detail, ok = f"failure injected by --inject-failure (measured: {detail})", False
        result = Result(check.name, ok, detail, round(seconds, 3), skipped)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return Report(
        device=target.device,
        replicas=target.replicas,
        steps_per_run=target.steps_per_run,
        results=results,
        seconds=time.perf_counter() - started,
        steps_per_second=measured.get("steps_per_second"),
        deprecations=list(deprecations),
        other_warnings=list(other_warnings),
        info=dict(target.info),
    )


class _LogCollector(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def captured_warnings():
    """Collects Python warnings and TensorFlow's logged warnings in a block.

    Yields a list that is filled, on exit, with (is_deprecation, message)
    pairs. TensorFlow logs its own deprecations (`deprecation.deprecated`)
    instead of warning, so its logger is diverted here too.
    """
    caught = []
    logger = logging.getLogger("tensorflow")
    collector = _LogCollector()
    saved = logger.handlers[:], logger.propagate
    logger.handlers[:] = [collector]
    logger.propagate = False
    try:
        with warnings.catch_warnings(record=True) as raised:
            warnings.simplefilter("always")
            yield caught
    finally:
        logger.handlers[:], logger.propagate = saved
        for w in raised:
            caught.append((issubclass(w.category, DeprecationWarning), one_line(str(w.message))))
        for message in collector.messages:
            first = message.strip().splitlines()[0] if message.strip() else message
            first = re.sub(r"^From .*?:\d+: ", "", first)  # TF's "From file:line: " prefix
            caught.append(("deprecated" in first, one_line(first)))
