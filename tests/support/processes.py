"""Processes seen from /proc: is one running, whose children are they, and waits on them."""

import os
import sys
import time

from compat_distribute.testing import deadlines

# How often a wait looks again.
POLL_S = 0.05


def running(pid):
    """Whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children_by_parent():
    """{parent pid: [child pids]} of every process in /proc."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:  # Gone meanwhile.
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid=None):
    """The descendants of `pid` (default: this process), but the session's warm
    interpreters that fork the tests' programs (see `forkrun`), which live as
    long as the session."""
    children = children_by_parent()
    forkrun = sys.modules.get("support.forkrun")  # Not loaded in the tests' own programs.
    warm = forkrun.WarmPython.running if forkrun is not None else set()
    found, todo = set(), [pid or os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in warm:
                found.add(child)
                todo.append(child)
    return found


def wait_for(condition, timeout_s=10.0):
    """Polls `condition()` until it is true or `timeout_s` (scaled by
    $COMPAT_DISTRIBUTE_TIMEOUT_SCALE) passes; returns its last value, for the
    caller to assert."""
    deadline = time.monotonic() + deadlines.scaled(timeout_s)
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(POLL_S)


def wait_gone(pids, timeout_s=10.0):
    """Waits until none of `pids` runs (a zombie counts as gone); returns those
    still running then, so `assert wait_gone(pids) == []` names them."""
    wait_for(lambda: not any(running(p) for p in pids), timeout_s)
    return [p for p in pids if running(p)]
