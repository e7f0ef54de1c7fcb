"""The smoke checks, run and reported in process on the session's 8 CPU devices.

The command line that runs them is tested in test_cli.py.
"""

import io
import time

import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute import _lazy
from compat_distribute.smoke import checks
from compat_distribute.smoke import progress as smoke_progress
from compat_distribute.smoke import report as smoke_report
from compat_distribute.smoke import run as smoke_run
from compat_distribute.smoke import table as smoke_table
from compat_distribute.smoke import targets as smoke_targets
from compat_distribute.testing import _backend


@pytest.fixture(scope="module", name="mwms_target")
def mwms_target_fixture():
    # One worker, no TF_CONFIG: one replica on the host CPU.
    strategy = compat_distribute.MultiWorkerMirroredStrategy()
    return smoke_targets.Target(strategy=strategy, device="MWMS shim", replicas=1, steps_per_run=3)


def test_all_checks_pass_under_multi_worker_shim(mwms_target):
    report = smoke_run.run_checks(mwms_target)
    by_name = {r.name: r for r in report.results}
    assert [r.name for r in report.results] == [c.name for c in smoke_table.CHECKS]
    assert report.ok, [r.detail for r in report.failures]
    assert by_name["all_reduce"].detail.startswith("sum of 1..1 = 1 in all 1 replicas")
    assert "counter 0 -> 3 after run_steps, -> 6" in by_name["run_steps"].detail
    assert by_name["logical_devices"].skipped
    assert by_name["logical_devices"].detail.startswith("skipped:")
    assert report.steps_per_second > 0
    assert any("experimental_run_v2 is deprecated; use run" in d for d in report.deprecations)
    # run_steps, dataset and training keep their 4 input iterators on the target.
    assert len(mwms_target.inputs) >= 4


def test_check_table_names_each_check_once():
    assert tuple(c.name for c in smoke_table.CHECKS) == (
        "replicas",
        "per_replica_values",
        "all_reduce",
        "run_steps",
        "logical_devices",
        "dataset",
        "checkpoint",
        "training",
    )
    # Each row's path names a function of the checks module.
    assert all(c.what and callable(_lazy.load(c.fn)) for c in smoke_table.CHECKS)


def test_fake_tpu_checks_measure_eight_replicas():
    target = smoke_targets.target(_backend.choose_backend("fake", topology="v3-8"), 2)
    assert target.device == "fake (v3-8, 8 cores on CPU)"
    measured = {}
    assert checks.check_replicas(target, measured) == "8 replicas in sync on 8 worker devices"
    assert checks.check_all_reduce(target, measured) == (
        "sum of 1..8 = 36 in all 8 replicas; reduce SUM 36, MEAN 4.5"
    )
    assert checks.check_logical_devices(target, measured).startswith(
        "4 replicas x 2 logical devices"
    )


def test_check_reports_what_it_measured_when_wrong(mwms_target):
    wrong = smoke_targets.Target(strategy=mwms_target.strategy, device="", replicas=3, steps_per_run=1)
    with pytest.raises(checks.CheckFailed, match=r"^num_replicas_in_sync: expected 3, got 1$"):
        checks.check_replicas(wrong, {})
    with pytest.raises(
        checks.CheckFailed,
        match=r"^all_reduce\(SUM\) of 1..n in each replica: expected \[6.0, 6.0, 6.0\], got \[1.0\]$",
    ):
        checks.check_all_reduce(wrong, {})


def test_a_check_that_raises_fails_with_a_one_line_reason():
    broken = smoke_targets.Target(strategy=object(), device="nothing", replicas=2, steps_per_run=1)
    report = smoke_run.run_checks(broken)
    assert not report.ok
    replicas = report.results[0]
    assert replicas.detail == (
        "AttributeError: 'object' object has no attribute 'num_replicas_in_sync'"
    )
    assert all("\n" not in r.detail for r in report.results)
    assert "FAILED replicas: AttributeError" in smoke_report.format_footer(report)


def test_inject_failure_fails_after_measuring(mwms_target):
    report = smoke_run.run_checks(mwms_target, inject_failure="replicas")
    assert [r.name for r in report.failures] == ["replicas"]
    assert report.failures[0].detail == (
        "failure injected by --inject-failure (measured: 1 replicas in sync on 1 worker devices)"
    )
    with pytest.raises(ValueError, match="inject_failure must be one of replicas, "):
        smoke_run.run_checks(mwms_target, inject_failure="nope")


class _TTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_ticks_only_on_a_tty():
    tty, pipe = _TTY(), io.StringIO()
    for stream in (tty, pipe):
        progress = smoke_progress.Progress(stream, interval=0.01)
        progress.start("[1/8] replicas")
        time.sleep(0.1)
        progress.stop()
    assert "\r  [1/8] replicas   0." in tty.getvalue()
    assert tty.getvalue().endswith("\r\033[K")
    assert pipe.getvalue() == ""


def test_warnings_are_collected_not_printed(capsys):
    import warnings

    with smoke_run.captured_warnings() as caught:
        warnings.warn("old_name is deprecated; use new_name", DeprecationWarning)
        tf.get_logger().warning("From x.py:3: f (from m) is deprecated and will be removed.\nMore")
        warnings.warn("something else", UserWarning)
    assert caught == [
        (True, "old_name is deprecated; use new_name"),
        (False, "something else"),
        (True, "f (from m) is deprecated and will be removed."),
    ]
    assert capsys.readouterr().err == ""
