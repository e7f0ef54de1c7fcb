"""A session that used TensorFlow ends its process as soon as its report is written.

TensorFlow 2.21 can block for minutes at interpreter exit, joining the threads
of tf.data iterators. How long depends on the iterators' age and the machine's
load, so each test project here also holds an object that, at interpreter
teardown, leaves a file and sleeps a minute: a stand-in that makes every
teardown block, and shows whether one began. The process must end before it,
after its atexit handlers (they clean up; each leaves a file too).
"""

import os
import re
import subprocess
import sys
import threading
import time

from plugin_helpers import clean_environment  # noqa: F401  # autouse

pytest_plugins = ["pytester"]

# Behaviour, not a benchmark: a generous bound, well under the stand-in's minute.
PROMPT_S = 20
RUN_TIMEOUT_S = 300

_PROJECT = """
import os
import time

import tensorflow as tf

OUT = {out!r}


class TeardownStall:
    def __init__(self):
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.path = os.path.join(OUT, "teardown-" + name)

    # Module globals may be gone by now: what it needs comes as defaults.
    def __del__(self, sleep=time.sleep, open=open):
        with open(self.path, "w"):
            pass
        sleep(60)  # At interpreter teardown, as TensorFlow's iterator threads can.


STALL = TeardownStall()
ITERATORS = []


def test_distributed_iterator(tpu_strategy):
    dataset = tf.data.Dataset.range(64).batch(8).repeat()
    iterator = iter(tpu_strategy.experimental_distribute_dataset(dataset))
    values = tpu_strategy.experimental_local_results(next(iterator))
    ITERATORS.append(iterator)  # Alive until the process ends.
    assert [v.numpy().tolist() for v in values] == {expected}
"""
_PASSES = [[i] for i in range(8)]  # a batch of 8 over the fake's 8 cores

_CONFTEST = """
import atexit
import os


def _say_atexit_ran():
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join({out!r}, "atexit-" + name), "w"):
        pass


atexit.register(_say_atexit_ran)
"""


def _run(pytester, expected, *args):
    """Runs the project with `pytest`: (exit status, seconds from the report line to
    the exit, output, the files left by atexit handlers and teardowns)."""
    out = pytester.mkdir("out")
    pytester.makeconftest(_CONFTEST.format(out=str(out)))
    pytester.makepyfile(test_project=_PROJECT.format(out=str(out), expected=expected))
    # A session of its own, also when this test runs in an xdist worker.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    process = subprocess.Popen(
        command, cwd=pytester.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )
    lines, reported = [], []

    def read():
        for line in process.stdout:
            lines.append(line)
            if re.match(r"\d+ (passed|failed)", line):
                reported.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        status = process.wait(timeout=RUN_TIMEOUT_S)
    finally:
        process.kill()
    ended = time.monotonic()
    reader.join(10)
    output = "".join(lines)
    assert reported, output
    return status, ended - reported[-1], output, sorted(p.name for p in out.iterdir())


def test_a_passing_session_ends_promptly_with_status_0(pytester):
    status, after_report, output, left = _run(pytester, _PASSES, "-p", "no:xdist")
    assert (status, left) == (0, ["atexit-main"]), output
    assert after_report < PROMPT_S, output


def test_a_failing_session_ends_promptly_with_status_1(pytester):
    status, after_report, output, left = _run(pytester, [[0]] * 8, "-p", "no:xdist")
    assert (status, left) == (1, ["atexit-main"]), output
    assert "1 failed" in output
    assert after_report < PROMPT_S, output


def test_an_xdist_worker_ends_itself_once_its_results_are_sent(pytester):
    # Otherwise xdist waits 10 s for the worker's teardown, then kills it.
    status, after_report, output, left = _run(pytester, _PASSES, "-n", "1")
    assert (status, left) == (0, ["atexit-gw0", "atexit-main"]), output
    assert after_report < PROMPT_S, output


def test_an_in_process_session_leaves_this_process_alone(pytester):
    # pytester runs it inside this test's process, which must go on.
    pytester.makepyfile("""
        import tensorflow as tf

        def test_uses_tensorflow():
            assert int(tf.constant(2) * 3) == 6
        """)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1)  # Reached: the run did not end this process.
