"""The `compat-distribute` command line.

Usage errors, --help and --version are tested in process (they stop before
any TensorFlow runtime or TPU look-up). Runs go through the console entry
point in subprocesses, as a user types them: a passing `--json` run on the
default fake TPU with a fresh TMPDIR, and a text run with an injected failure.
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from support.load import bound

import compat_distribute
from compat_distribute import _env
from compat_distribute.smoke import cli
from compat_distribute.smoke import table as smoke_table
from compat_distribute.testing._fake_tpu import topologies

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fake_refuses(topology, hosts):
    """What the fake itself says of `hosts=` for `topology` (the command quotes it)."""
    with pytest.raises(ValueError) as raised:
        topologies.host_count(topology, hosts)
    return str(raised.value)


def run_cli(*args, env=None, timeout=300):
    """Runs `python -m compat_distribute ARGS` (the console entry point) as a user would."""
    full_env = dict(os.environ, PYTHONPATH=REPO)
    full_env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # unless the test sets it, as a user would
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "compat_distribute", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=REPO,
        check=False,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["smoke", "--steps-per-run", "0"],
            "argument --steps-per-run: must be a whole number from 1 to 10000; got '0'",
        ),
        (
            ["smoke", "--steps-per-run", "10001"],
            "argument --steps-per-run: must be a whole number from 1 to 10000; got '10001'",
        ),
        (
            ["smoke", "--timeout", "-1"],
            "argument --timeout: must be a number of seconds > 0 and at most 86400; got '-1'",
        ),
        (
            ["smoke", "--topology", "v9-99"],
            "argument --topology: invalid choice: 'v9-99' (choose from "
            + ", ".join(repr(t) for t in smoke_table.topologies())
            + ")",
        ),
        (
            ["smoke", "--tpu", ""],
            "argument --tpu: expected 'fake', 'auto' or the name of a TPU (no spaces); got ''",
        ),
        (
            ["smoke", "--tpu", "fak"],
            "argument --tpu: expected 'fake', 'auto' or the name of a TPU; got 'fak'. Did you "
            "mean --tpu=fake? For a TPU really named 'fak', set TPU_NAME=fak and pass --tpu=auto.",
        ),
        (["smoke", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (
            ["smoke", "--tpu", "x", "--topology", "v3-8"],
            "argument --topology: applies to the fake TPU only; got --topology v3-8 with "
            "--tpu x. Drop --topology.",
        ),
        (
            ["smoke", "--inject-failure", "nope"],
            "argument --inject-failure: invalid choice: 'nope'",
        ),
        (["smoke", "--hosts", "0"], "argument --hosts: expected a positive integer; got '0'"),
        (
            ["smoke", "--hosts", "9"],
            "argument --hosts: expected at most 8 hosts (the most of any fake TPU preset); got "
            "'9'. A fake TPU runs on 1 host (every core in one process) or on its preset's own "
            "hosts (v3-32: 4).",
        ),
        (
            ["smoke", "--topology", "v3-32", "--hosts", "2"],
            lambda: "argument --hosts: with --topology v3-32: "
            + _fake_refuses("v3-32", 2)
            + " Leave --hosts out (None) for the topology's own count.",
        ),
        (
            ["smoke", "--hosts", "4"],  # the default v3-8 has one host
            lambda: "argument --hosts: with --topology v3-8: "
            + _fake_refuses("v3-8", 4)
            + " Leave --hosts out (None) for the topology's own count.",
        ),
        (
            ["smoke", "--tpu", "x", "--hosts", "1"],
            "argument --hosts: applies to the fake TPU only; got --hosts 1 with --tpu x. "
            "Drop --hosts.",
        ),
    ],
)
def test_bad_arguments_exit_2_naming_the_flag(args, message, capsys):
    message = message() if callable(message) else message
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: compat-distribute smoke ")
    last = err.strip().splitlines()[-1]
    assert last.startswith("compat-distribute smoke: error: ")
    assert message in last
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "the following arguments are required: COMMAND"),
        (["smok"], "argument COMMAND: invalid choice: 'smok' (choose from 'smoke')"),
        (  # was "the following arguments are required: COMMAND", the flag unnamed
            ["--bogus-flag"],
            "unrecognized arguments: --bogus-flag. Before COMMAND come only -h, --help, "
            "--version; a command's options follow it (see 'compat-distribute smoke --help').",
        ),
        (
            ["--json", "smoke"],
            "unrecognized arguments: --json. Before COMMAND come only -h, --help, --version; "
            "a command's options follow it (see 'compat-distribute smoke --help').",
        ),
    ],
)
def test_bad_command_exits_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"compat-distribute: error: {message}"


def test_version(capsys):
    import importlib.metadata

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    version = importlib.metadata.version("compat_distribute")  # the package's metadata
    assert capsys.readouterr().out == f"compat-distribute {version}\n"


@pytest.mark.parametrize(
    "args, code",
    [
        (["--help"], 0),
        (["--version"], 0),
        (["smoke", "--help"], 0),
        (["smoke", "--tpu", "fak"], 2),
        (["smoke", "--steps-per-run", "0"], 2),
        (["smoke", "--topology", "v3-32", "--hosts", "3"], 2),
        (["smok"], 2),
    ],
)
def test_help_and_usage_errors_answer_before_tensorflow_is_imported(args, code):
    result = _run_watching_for_tensorflow(args)
    assert result.returncode == code, result.stderr
    assert (result.stdout + result.stderr).strip(), "no answer"


def _run_watching_for_tensorflow(args, env=None):
    """Runs the console entry point's own function in a fresh process, asserting
    that it answers, and ends, with TensorFlow never imported."""
    probe = (
        "import atexit, os, sys\n"
        "atexit.register(lambda: os.write(3, str('tensorflow' in sys.modules).encode()))\n"
        "from compat_distribute.smoke import cli\n"
        f"cli.entry({args!r})\n"
    )
    read_end, write_end = os.pipe()
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", f"import os; os.dup2({write_end}, 3)\n" + probe],
        capture_output=True, text=True, timeout=120, pass_fds=(write_end,),
        env=dict(os.environ, PYTHONPATH=REPO, **(env or {})),
    )
    took = time.monotonic() - start
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        tensorflow_imported = pipe.read()
    assert tensorflow_imported == "False", (args, tensorflow_imported, result.stderr[-2000:])
    assert took < bound(60), f"{args} took {took:.1f} s"
    return result


@pytest.mark.parametrize(
    "env, message",
    [
        (  # was read only by clusters and pods: a v3-8 run ignored it
            {"COMPAT_DISTRIBUTE_TIMEOUT_SCALE": "abc"},
            "COMPAT_DISTRIBUTE_TIMEOUT_SCALE must be a number > 0 and at most 100; got 'abc'. "
            "It multiplies every time limit given to a child process (e.g. 3 on a loaded "
            "machine). Set it so, or unset it for the default (1).",
        ),
        (
            {"COMPAT_DISTRIBUTE_ZYGOTE": "maybe"},
            "COMPAT_DISTRIBUTE_ZYGOTE must be 1/0, true/false, yes/no or on/off; got 'maybe'. "
            "It makes local_cluster and fake TPU pods fork their tasks from one process that "
            "imported TensorFlow (1), or start each task as a fresh process (0). Set it so, or "
            "unset it for the default (1).",
        ),
        (
            {"COMPAT_DISTRIBUTE_POD_NETWORK": "lan"},
            "COMPAT_DISTRIBUTE_POD_NETWORK must be one of 'auto', 'private', 'host'; got 'lan'. "
            "It chooses where a fake TPU pod's host servers listen: on a private network reached "
            "through a relay, on this process's network, or (auto) private where the platform "
            "allows it. Set it so, or unset it for the default (auto).",
        ),
        (
            {"COMPAT_DISTRIBUTE_TIMEOUT_SCAL": "3"},
            "COMPAT_DISTRIBUTE_TIMEOUT_SCAL is not a compat_distribute setting. Did you mean "
            "COMPAT_DISTRIBUTE_TIMEOUT_SCALE? The settings are "
            + ", ".join(row.name for row in _env.VARIABLES)
            + " (docs/settings.md).",
        ),
    ],
)
def test_a_bad_compat_distribute_variable_is_one_line_and_exit_2_before_tensorflow(
    env, message
):
    result = _run_watching_for_tensorflow(["smoke"], env)
    assert result.returncode == 2
    assert result.stderr == f"compat-distribute smoke: error: {message}\n"
    assert result.stdout == ""


def test_smoke_help_lists_every_option_checks_and_topologies(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["smoke", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    options = [s for a in cli.build_smoke_parser()._actions for s in a.option_strings]
    assert "--inject-failure" in options and "--verbose" in options
    for option in options:
        assert option in out, option
    for name in [c.name for c in smoke_table.CHECKS]:
        assert f"\n  {name} " in out, name
    names = ", ".join(smoke_table.topologies())
    assert f"the fake TPU's topology: {names} (default v3-8)" in " ".join(out.split())
    assert {"v2-8", "v3-8", "v4-8", "v5litepod-8", "v5p-8", "v6e-8"} <= set(smoke_table.topologies())
    assert (
        "--hosts N the fake TPU's hosts: 1 puts every core of a pod topology (e.g. v3-32) in "
        "this process; the topology's own count (v3-32: 4, the default) runs a host process each"
    ) in " ".join(out.split())


@pytest.mark.parametrize(
    "args, hosts",
    [
        (["--topology", "v3-32", "--hosts", "1"], 1),
        (["--topology", "v3-32", "--hosts", "4"], 4),
        (["--topology", "v3-32"], None),  # the topology's own
        (["--hosts", "1"], 1),  # the default v3-8's own
        (["--tpu", "auto", "--topology", "v4-16", "--hosts", "2"], 2),  # for the fake, if chosen
    ],
)
def test_host_counts_the_topology_has_are_taken(args, hosts):
    parser = cli.build_smoke_parser()
    parsed = parser.parse_args(args)
    cli._check_fake_options(parsed, parser)  # pylint: disable=protected-access
    assert parsed.hosts == hosts


def test_unreachable_tpu_fails_fast_with_reason(capsys):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    code = cli.main(["smoke", "--tpu", f"grpc://127.0.0.1:{port}", "--json"])
    elapsed = time.monotonic() - start
    out, err = capsys.readouterr()
    assert code == 1
    assert elapsed < bound(10)
    reason = f"TPU worker 127.0.0.1:{port} does not answer: [Errno 111] Connection refused"
    assert json.loads(out) == {
        "ok": False,
        "device": f"TPU grpc://127.0.0.1:{port}",
        "replicas": 0,
        "checks": [],
        "error": reason,
    }
    assert err == f"compat-distribute smoke: error: {reason}\n"


def test_auto_with_a_tpu_name_that_does_not_resolve_names_the_variable(capsys, monkeypatch):
    for name in ("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TPU_NAME", "garbage")
    code = cli.main(["smoke", "--tpu", "auto", "--timeout", "60"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(
        "compat-distribute smoke: error: the TPU named by the environment "
        "(TPU_NAME='garbage') is not reachable: "
    ), err
    assert err.endswith(
        ". Set TPU_NAME to a reachable TPU (its name, or grpc://host:port), or unset it: then "
        "'auto' takes this host's own TPU, else the local GPUs or the fake.\n"
    ), err


def test_json_run_on_the_fake_tpu_prints_the_report_alone_and_leaves_tmpdir_empty():
    with tempfile.TemporaryDirectory() as tmpdir:
        result = run_cli("smoke", "--json", "--steps-per-run", "2", env={"TMPDIR": tmpdir})
        left = os.listdir(tmpdir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""  # no oneDNN, CUDA stub or cuInit lines, no warnings
    assert left == []  # AutoGraph's generated files are removed at exit
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert report["ok"] is True
    assert report["device"] == "fake (v3-8, 8 cores on CPU)"
    assert report["replicas"] == 8
    assert report["steps_per_run"] == 2
    assert (report["hardware"], report["topology"]) == ("fake_tpu", "v3-8")
    assert [c["name"] for c in report["checks"]] == list([c.name for c in smoke_table.CHECKS])
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


# What changes from run to run in a text report: seconds and steps per second.
_TIMINGS = re.compile(r" *\d+\.\d+s\b|\d+(\.\d+)? steps/s")


def _readme_sample():
    readme = open(os.path.join(REPO, "README.md")).read()
    return readme.split("```\n$ compat-distribute smoke\n", 1)[1].split("```", 1)[0]


def test_a_default_text_run_passes_and_prints_the_readme_sample():
    result = run_cli("smoke")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    masked = [_TIMINGS.sub("#", line) for line in result.stdout.splitlines()]
    assert masked == [_TIMINGS.sub("#", line) for line in _readme_sample().splitlines()]


def test_text_run_with_injected_failure_shows_the_held_back_log():
    result = run_cli(
        "smoke", "--topology", "v2-8", "--steps-per-run", "1", "--inject-failure", "checkpoint"
    )
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[0] == (
        "compat-distribute smoke: fake (v2-8, 8 cores on CPU), steps_per_run=1"
    )
    statuses = [line.split()[:2] for line in lines[1:9]]
    assert statuses == [["FAIL" if n == "checkpoint" else "PASS", n] for n in [c.name for c in smoke_table.CHECKS]]
    assert lines[-1].startswith(
        "FAILED checkpoint: failure injected by --inject-failure (measured: 3 variables"
    )
    assert any(line.startswith("training: ") and "steps/s" in line for line in lines)
    assert "7/8 checks passed in " in result.stdout
    assert "\r" not in result.stderr  # not a TTY: no progress ticker
    # A failed run shows what TensorFlow logged, after the report.
    assert result.stderr.startswith("TensorFlow's native log (last ")
    assert "lines), shown because the run failed:\n" in result.stderr
    assert "is deprecated" not in result.stderr  # caught by the checks, not printed


def test_verbose_lets_tensorflow_log_through_and_user_level_is_respected():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tpu = f"grpc://127.0.0.1:{port}"
    verbose = run_cli("smoke", "--tpu", tpu, "--verbose", timeout=120)
    quiet = run_cli("smoke", "--tpu", tpu, timeout=120)
    user_level = run_cli("smoke", "--tpu", tpu, env={"TF_CPP_MIN_LOG_LEVEL": "0"}, timeout=120)
    error = f"compat-distribute smoke: error: TPU worker 127.0.0.1:{port} does not answer"
    assert verbose.returncode == quiet.returncode == user_level.returncode == 1
    # Verbose, or a level the user set: TensorFlow's own lines come first.
    for result in (verbose, user_level):
        assert not result.stderr.startswith(error)
        assert error in result.stderr
        assert "native log" not in result.stderr
    # Held back: the error first, then the log because the run failed.
    assert quiet.stderr.startswith(error)
    assert "TensorFlow's native log (last " in quiet.stderr


def _processes_in_session(session_id):
    """The live processes of session `session_id` (a command started in a session of its own)."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # Gone meanwhile.
            continue
        if int(fields[3]) == session_id and fields[0] != "Z":
            found.append(int(name))
    return found


def test_a_pod_topology_on_one_host_runs_in_the_command_alone():
    with tempfile.TemporaryDirectory() as tmpdir:
        env = dict(os.environ, PYTHONPATH=REPO, TMPDIR=tmpdir)
        env.pop("TF_CPP_MIN_LOG_LEVEL", None)
        # A v4-16 (2 hosts of 4 cores): a v3-32's 32 replicas take three times as long.
        args = ["smoke", "--topology", "v4-16", "--hosts", "1", "--steps-per-run", "1"]
        command = subprocess.Popen(
            [sys.executable, "-m", "compat_distribute", *args, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
            start_new_session=True,  # its session id is its pid: what it starts stays in it
        )
        try:
            out, err = command.communicate(timeout=300)
        finally:
            command.kill()
        left = os.listdir(tmpdir)
    assert command.returncode == 0, err[-3000:]
    assert err == ""
    assert left == []  # no hosts' directory either
    assert _processes_in_session(command.pid) == []
    report = json.loads(out)
    assert report["ok"] is True
    assert report["device"] == "fake (v4-16 on 1 host, 8 cores on CPU)"
    assert (report["replicas"], report["topology"], report["hosts"]) == (8, "v4-16", 1)
    assert [c["name"] for c in report["checks"] if not c["ok"]] == []
    details = {c["name"]: c["detail"] for c in report["checks"]}
    assert details["replicas"] == "8 replicas in sync on 8 worker devices"
    assert details["all_reduce"].startswith("sum of 1..8 = 36 in all 8 replicas")
