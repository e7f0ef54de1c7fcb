"""tools/suite_time.py, the wrapper `make test` runs the suite in: its exit status
and its handing on of SIGTERM, so that stopping `make test` stops the suite."""

import os
import signal
import subprocess
import sys

from support import processes

SUITE_TIME = os.path.join(os.path.dirname(__file__), os.pardir, "tools", "suite_time.py")

# The command: says it is running, then ends with status 3 on SIGTERM.
COMMAND = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("command got SIGTERM", flush=True), sys.exit(3)))
print("running", flush=True)
time.sleep(60)
"""


def test_a_sigterm_to_the_wrapper_ends_the_command_through_its_own_handler():
    wrapper = subprocess.Popen(
        [sys.executable, SUITE_TIME, sys.executable, "-c", COMMAND],
        stdout=subprocess.PIPE, text=True,
    )
    assert wrapper.stdout.readline() == "running\n"
    command = processes.descendants(wrapper.pid)
    assert len(command) == 1, command
    wrapper.send_signal(signal.SIGTERM)
    out, _ = wrapper.communicate(timeout=30)
    assert wrapper.returncode == 3
    lines = out.splitlines()
    assert lines[0] == "command got SIGTERM"
    assert lines[1].startswith("suite time: ") and " s wall, " in lines[1]
    assert processes.wait_gone(list(command)) == []


def test_the_wrapper_exits_with_the_commands_status():
    result = subprocess.run(
        [sys.executable, SUITE_TIME, sys.executable, "-c", "raise SystemExit(5)"],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 5
    assert result.stdout.startswith("suite time: ")
