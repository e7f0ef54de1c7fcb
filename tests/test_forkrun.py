"""The tests' warm interpreter (`support.forkrun`) and `support.programs.run_program`: a forked
program behaves as the same program in a fresh process."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from support import forkrun
from support.processes import wait_gone

# Prints whether TensorFlow was imported before the program's first line, and
# the pid of the program's parent.
_WHO_STARTED_ME = """
import os, sys
print("tensorflow" in sys.modules, os.getppid())
"""


@pytest.mark.parametrize(
    "code, status, stdout, stderr_end",
    [
        ("print('out'); import sys; print('err', file=sys.stderr)", 0, "out\n", "err\n"),
        ("print('before', flush=True); raise ValueError('bad value')", 1, "before\n",
         'File "<string>", line 1, in <module>\nValueError: bad value\n'),
        ("raise SystemExit(3)", 3, "", ""),
        ("import sys; sys.exit('a message')", 1, "", "a message\n"),
        ("import atexit; atexit.register(print, 'at exit')", 0, "at exit\n", ""),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", -signal.SIGTERM, "", ""),
        ("raise KeyboardInterrupt", -signal.SIGINT, "", "KeyboardInterrupt\n"),
    ],
    ids=["ok", "exception", "system-exit", "exit-message", "atexit", "signal", "interrupt"],
)
def test_a_forked_program_exits_as_python_would(run_program, code, status, stdout, stderr_end):
    forked = run_program(["-c", code])
    fresh = run_program(["-c", code], fresh=True)
    for result in (forked, fresh):
        assert (result.returncode, result.stdout) == (status, stdout), result.stderr
        assert result.stderr.endswith(stderr_end)
    assert forked.stderr == fresh.stderr


def test_a_forked_program_has_its_env_cwd_argv_and_main(run_program, tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        print(__name__, __file__, sys.argv, sys.path[0], os.getcwd(), os.environ["MARK"])
        print("tensorflow" in sys.modules)
    """))
    (tmp_path / "sub").mkdir()
    argv = ["../prog.py", "a", "b"]
    forked = run_program(argv, env={"MARK": "m"}, cwd=tmp_path / "sub")
    fresh = run_program(argv, env={"MARK": "m"}, cwd=tmp_path / "sub", fresh=True)
    assert forked.returncode == 0, forked.stderr
    first = f"__main__ {tmp_path / 'sub' / '..' / 'prog.py'} {argv} {tmp_path} {tmp_path / 'sub'} m"
    assert forked.stdout.splitlines() == [first, "True"]  # imported by the warm interpreter
    assert fresh.stdout.splitlines() == [first, "False"]
    code = "import os, sys; print(sys.argv, repr(sys.path[0]), 'MARK' in os.environ)"
    forked = run_program(["-c", code, "x"], cwd=tmp_path)
    assert forked.stdout == "['-c', 'x'] '' False\n", forked.stderr


def test_an_import_time_variable_gives_a_fresh_process(run_program):
    forked = run_program(["-c", _WHO_STARTED_ME])
    tf_log = run_program(["-c", _WHO_STARTED_ME], env={"TF_CPP_MIN_LOG_LEVEL": "1"})
    legacy = run_program(["-c", _WHO_STARTED_ME], env={"TF_USE_LEGACY_KERAS": "1"})
    late = run_program(["-c", _WHO_STARTED_ME], env={"TF_CONFIG": "{}"})
    assert forked.stdout.split()[0] == late.stdout.split()[0] == "True"
    assert int(forked.stdout.split()[1]) != os.getpid()  # the warm interpreter
    for fresh in (tf_log, legacy):
        assert fresh.stdout.split() == ["False", str(os.getpid())], fresh.stderr
    assert forkrun.reads_at_import("KERAS_BACKEND") and forkrun.reads_at_import("PYTHONPATH")
    assert forkrun.reads_at_import("CUDA_VISIBLE_DEVICES")
    assert not forkrun.reads_at_import("TF_CONFIG") and not forkrun.reads_at_import("TMPDIR")


def test_a_forked_program_has_what_tensorflows_import_put_in_its_environment():
    # This process imported TensorFlow, so its environment holds them already.
    set_at_import = ("TF2_BEHAVIOR", "ENABLE_RUNTIME_UPTIME_TELEMETRY")
    env = {k: v for k, v in os.environ.items() if k not in set_at_import}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    code = "import os, tensorflow; print([os.environ.get(k) for k in %r])" % (set_at_import,)
    warm = forkrun.WarmPython(env)
    try:
        forked = warm.run(["-c", code], env=env, timeout=60)
        with_own = warm.run(["-c", code], env=dict(env, ENABLE_RUNTIME_UPTIME_TELEMETRY="0"),
                            timeout=60)
    finally:
        warm.stop()
    fresh = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120)
    assert forked.stdout == fresh.stdout == "['1', '1']\n", (forked.stderr, fresh.stderr)
    assert with_own.stdout == "['1', '0']\n", with_own.stderr  # TF only sets a default


def test_a_timeout_kills_the_program_and_what_it_started(run_program):
    code = """
import subprocess, sys, time
sleeper = subprocess.Popen(["sleep", "300"])
print(sleeper.pid, flush=True)
time.sleep(300)
"""
    with pytest.raises(subprocess.TimeoutExpired) as info:
        run_program(["-c", code], timeout=10)
    assert info.value.timeout == 10
    sleeper = int(info.value.output.split()[0])
    assert wait_gone([sleeper]) == [], f"sleep {sleeper} outlived its program"


def test_the_fork_is_refused_once_tensorflow_runs_in_the_warm_interpreter(tmp_path):
    (tmp_path / "runs_an_op.py").write_text("import tensorflow as tf\ntf.constant(1.0)\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    warm = forkrun.WarmPython(env, imports=["runs_an_op"])
    try:
        with pytest.raises(RuntimeError, match="refused to fork: TensorFlow's runtime is "
                                               "initialised in it"):
            warm.run(["-c", "print(1)"], env=env, timeout=30)
    finally:
        warm.stop()
    assert warm.process.returncode == 0


def test_the_warm_interpreter_dies_with_its_parent():
    code = f"""
import os, sys
sys.path.insert(0, {os.path.dirname(__file__)!r})  # tests/, holding `support`
from support import forkrun
warm = forkrun.WarmPython(dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
result = warm.run(["-c", "import os; print(os.getpid())"], env=warm.env, timeout=30)
print(warm.process.pid, result.stdout.strip(), flush=True)
os._exit(0)  # no stop(): the warm interpreter is orphaned
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stderr
    warm, child = (int(pid) for pid in result.stdout.split())
    assert wait_gone([child], 1.0) == []
    assert wait_gone([warm]) == [], f"the warm interpreter {warm} outlived its parent"


# Writes a file in its temp dir, prints the dir, then exits with the status given.
_LEAVES_A_FILE = """
import sys, tempfile
tempfile.mkstemp(prefix="left-")
print(tempfile.gettempdir())
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("fresh", [False, True], ids=["forked", "fresh"])
def test_a_program_that_ends_well_must_leave_its_temp_dir_empty(run_program, fresh):
    with pytest.raises(AssertionError, match=r"ended with status 0 but left \['left-\w+'\]"):
        run_program(["-c", _LEAVES_A_FILE, "0"], fresh=fresh)
    # A failing program's leftovers are no error of their own; either way they go.
    failed = run_program(["-c", _LEAVES_A_FILE, "1"], fresh=fresh)
    temp_dir = failed.stdout.strip()
    assert failed.returncode == 1 and os.path.basename(temp_dir).startswith("program-")
    assert not os.path.exists(temp_dir)
