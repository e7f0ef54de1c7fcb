"""The smoke checks, in process on the session's devices, and the command line.

The command line runs in subprocesses (it sets up its own devices): one
passing `--json` run, one text run with an injected failure, one bad flag.
Argument errors and an unreachable TPU are tested in process: they stop
before TensorFlow's runtime starts.
"""

import io
import json
import os
import subprocess
import sys
import time

import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute import __main__ as cli
from compat_distribute import smoke

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    return subprocess.run(
        [sys.executable, "-m", "compat_distribute", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


@pytest.fixture(scope="module", name="mwms_target")
def mwms_target_fixture():
    # One worker, no TF_CONFIG: one replica on the host CPU.
    strategy = compat_distribute.MultiWorkerMirroredStrategy()
    return smoke.Target(strategy=strategy, device="MWMS shim", replicas=1, steps_per_run=3)


def test_all_checks_pass_under_multi_worker_shim(mwms_target):
    report = smoke.run_checks(mwms_target)
    by_name = {r.name: r for r in report.results}
    assert [r.name for r in report.results] == list(smoke.CHECK_NAMES)
    assert report.ok, [r.detail for r in report.failures]
    assert by_name["all_reduce"].detail.startswith("sum of 1..1 = 1 in all 1 replicas")
    assert "counter 0 -> 3 after run_steps, -> 6" in by_name["run_steps"].detail
    assert by_name["logical_devices"].skipped
    assert by_name["logical_devices"].detail.startswith("skipped:")
    assert report.steps_per_second > 0
    assert any("experimental_run_v2 is deprecated; use run" in d for d in report.deprecations)


def test_fake_tpu_checks_measure_eight_replicas():
    target = smoke.fake_tpu_target("v3-8", 2)
    measured = {}
    assert smoke.check_replicas(target, measured) == "8 replicas in sync on 8 worker devices"
    assert smoke.check_all_reduce(target, measured) == (
        "sum of 1..8 = 36 in all 8 replicas; reduce SUM 36, MEAN 4.5"
    )
    assert smoke.check_logical_devices(target, measured).startswith(
        "4 replicas x 2 logical devices"
    )


def test_check_reports_what_it_measured_when_wrong(mwms_target):
    wrong = smoke.Target(strategy=mwms_target.strategy, device="", replicas=3, steps_per_run=1)
    with pytest.raises(smoke.CheckFailed, match=r"^num_replicas_in_sync: expected 3, got 1$"):
        smoke.check_replicas(wrong, {})
    with pytest.raises(
        smoke.CheckFailed,
        match=r"^all_reduce\(SUM\) of 1..n in each replica: expected \[6.0, 6.0, 6.0\], got \[1.0\]$",
    ):
        smoke.check_all_reduce(wrong, {})


def test_a_check_that_raises_fails_with_a_one_line_reason():
    broken = smoke.Target(strategy=object(), device="nothing", replicas=2, steps_per_run=1)
    report = smoke.run_checks(broken)
    assert not report.ok
    replicas = report.results[0]
    assert replicas.detail == (
        "AttributeError: 'object' object has no attribute 'num_replicas_in_sync'"
    )
    assert all("\n" not in r.detail for r in report.results)
    assert "FAILED replicas: AttributeError" in smoke.format_footer(report)


def test_inject_failure_fails_after_measuring(mwms_target):
    report = smoke.run_checks(mwms_target, inject_failure="replicas")
    assert [r.name for r in report.failures] == ["replicas"]
    assert report.failures[0].detail == (
        "failure injected by --inject-failure (measured: 1 replicas in sync on 1 worker devices)"
    )
    with pytest.raises(ValueError, match="inject_failure must be one of replicas, "):
        smoke.run_checks(mwms_target, inject_failure="nope")


class _TTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_ticks_only_on_a_tty():
    tty, pipe = _TTY(), io.StringIO()
    for stream in (tty, pipe):
        progress = smoke.Progress(stream, interval=0.01)
        progress.start("[1/8] replicas")
        time.sleep(0.1)
        progress.stop()
    assert "\r  [1/8] replicas   0." in tty.getvalue()
    assert tty.getvalue().endswith("\r\033[K")
    assert pipe.getvalue() == ""


def test_warnings_are_collected_not_printed(capsys):
    import warnings

    with smoke._captured_warnings() as caught:  # pylint: disable=protected-access
        warnings.warn("old_name is deprecated; use new_name", DeprecationWarning)
        tf.get_logger().warning("From x.py:3: f (from m) is deprecated and will be removed.\nMore")
        warnings.warn("something else", UserWarning)
    assert caught == [
        (True, "old_name is deprecated; use new_name"),
        (False, "something else"),
        (True, "f (from m) is deprecated and will be removed."),
    ]
    assert capsys.readouterr().err == ""


# Command line.


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["smoke", "--steps-per-run", "0"],
            "argument --steps-per-run: must be a positive int (>= 1); got '0'",
        ),
        (
            ["smoke", "--topology", "v9-99"],
            "argument --topology: unknown topology 'v9-99'; choose from v2-8, v3-8, v4-8",
        ),
        (["smoke", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (
            ["smoke", "--tpu", "x", "--topology", "v3-8"],
            "argument --topology: applies to the fake TPU only",
        ),
        (
            ["smoke", "--inject-failure", "nope"],
            "argument --inject-failure: invalid choice: 'nope'",
        ),
    ],
)
def test_bad_arguments_exit_2_with_usage(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: compat-distribute smoke ")
    last = err.strip().splitlines()[-1]
    assert last.startswith("compat-distribute smoke: error: ")
    assert message in last
    assert "Traceback" not in err


def test_unreachable_tpu_fails_fast_with_reason(capsys):
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    code = cli.main(["smoke", "--tpu", f"grpc://127.0.0.1:{port}", "--json"])
    elapsed = time.monotonic() - start
    out, err = capsys.readouterr()
    assert code == 1
    assert elapsed < 10
    assert json.loads(out) == {
        "ok": False,
        "device": f"TPU grpc://127.0.0.1:{port}",
        "replicas": 0,
        "checks": [],
        "error": f"TPU worker 127.0.0.1:{port} does not answer: [Errno 111] Connection refused",
    }
    assert err == (
        f"compat-distribute smoke: error: TPU worker 127.0.0.1:{port} does not answer: "
        f"[Errno 111] Connection refused\n"
    )


def test_cli_json_on_the_fake_tpu():
    result = run_cli("smoke", "--json", "--steps-per-run", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert report["ok"] is True
    assert report["device"] == "fake TPU v3-8 (8 cores on 8 virtual CPU devices)"
    assert report["replicas"] == 8
    assert report["steps_per_run"] == 2
    assert report["topology"] == "v3-8"
    assert [c["name"] for c in report["checks"]] == list(smoke.CHECK_NAMES)
    for check in report["checks"]:
        assert set(check) == {"name", "ok", "detail", "seconds", "skipped"}
        assert check["ok"] is True and check["skipped"] is False, check
        assert isinstance(check["seconds"], float) and check["seconds"] >= 0
    details = {c["name"]: c["detail"] for c in report["checks"]}
    assert details["per_replica_values"].endswith("[0, 10, 20, 30, 40, 50, 60, 70]")
    assert details["all_reduce"].startswith("sum of 1..8 = 36 in all 8 replicas")
    assert details["run_steps"].startswith("counter 0 -> 2 after run_steps, -> 4 after")
    assert details["dataset"].startswith("global batch 16 -> 8 x 2 per replica")
    assert report["steps_per_second"] > 0
    assert "experimental_run_v2 is deprecated; use run (renamed in TensorFlow 2.2)" in (
        report["deprecation_warnings"]
    )
    assert "is deprecated" not in result.stderr  # caught, not printed


def test_cli_text_report_and_injected_failure():
    result = run_cli(
        "smoke", "--topology", "v2-8", "--steps-per-run", "1", "--inject-failure", "checkpoint"
    )
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[0] == (
        "compat-distribute smoke: fake TPU v2-8 (8 cores on 8 virtual CPU devices), steps_per_run=1"
    )
    statuses = [line.split()[:2] for line in lines[1:9]]
    assert statuses == [["FAIL" if n == "checkpoint" else "PASS", n] for n in smoke.CHECK_NAMES]
    assert lines[-1].startswith(
        "FAILED checkpoint: failure injected by --inject-failure (measured: 3 variables"
    )
    assert any(line.startswith("training: ") and "steps/s" in line for line in lines)
    assert "7/8 checks passed in " in result.stdout
    assert "\r" not in result.stderr  # not a TTY: no progress ticker
