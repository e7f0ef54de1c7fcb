"""A SIGTERM to an xdist controller reaches its workers, so a session ended so leaves nothing.

A SIGTERM ends a pytest process at once (its default action), and the
cluster launcher first stops the clusters and pod hosts that process started
(`cluster.launcher`). Under xdist the tests run in worker processes, which
the controller's end would leave running their tests for seconds more: the
controller forwards the signal to its child processes, waits (bounded) until
they have ended, then ends by the same signal.
"""

import os
import signal
import time

from compat_distribute.testing import deadlines

# How long the controller waits for its workers to end after forwarding a SIGTERM (scaled).
WORKERS_END_S = 10.0


def _children():
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # Gone meanwhile.
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.append(int(name))
    return found


def _forward(signum, frame):
    del frame
    children = _children()
    for pid in children:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + deadlines.scaled(WORKERS_END_S)
    while set(children) & set(_children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def forward_to_workers():
    """In an xdist controller whose SIGTERM has its default action (Linux)."""
    if os.path.isdir("/proc") and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _forward)
