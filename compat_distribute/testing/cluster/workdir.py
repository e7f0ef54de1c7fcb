"""Each cluster's temporary directory, and reaping what a killed run left.

Internal: not part of the public API; the names below may change.

A cluster keeps its tasks' logs and their temporary directories (each task's
TMPDIR, so what a task writes there, such as a non-chief worker's checkpoint,
goes when the cluster goes, also when the task is killed) in one directory,
`local_cluster-<owner pid>.<owner start time>-XXXX` in the system's temp dir.
`tasks` in it lists each task's pid and start time.

A parent killed by SIGKILL cannot clean up: its tasks die with it (the
parent-death signal, see `task`), and the next cluster started on the machine
removes the directories whose owner is gone, killing first any task listed
there that still runs (a task launched where no parent-death signal exists).
Start times tell a process from a later one that reuses its pid. Only this
user's directories are reaped, and owners are looked up in this process's pid
namespace: containers that share a temp dir but not their pids should give
each cluster its own temp dir (TMPDIR).
"""

import os
import re
import shutil
import signal
import tempfile

__all__ = ["KEPT_LOGS", "LOGS_PREFIX", "PREFIX", "TASKS_FILE", "WorkDir", "reap_abandoned", "start_time"]

PREFIX = "local_cluster-"
# The directories of logs kept after a fault, beside the clusters' own.
LOGS_PREFIX = "local_cluster-logs-"
# How many of them stay in a temp dir: the newest.
KEPT_LOGS = 10
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)\.(\d+)-")
TASKS_FILE = "tasks"


def start_time(pid):
    """The process's start time in clock ticks since boot ("0" where /proc is
    missing), or None when no such process runs."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
    except (OSError, IndexError):
        return None
    try:  # No /proc (macOS): by pid alone.
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return "0"


def _runs(pid, started):
    return started is not None and start_time(pid) == started


class WorkDir:
    """A new cluster directory owned by this process."""

    def __init__(self):
        pid = os.getpid()
        self.path = tempfile.mkdtemp(prefix=f"{PREFIX}{pid}.{start_time(pid) or 0}-")

    def log_path(self, name):
        return os.path.join(self.path, f"{name.replace(' ', '-')}.log")

    def task_temp_dir(self, name):
        path = os.path.join(self.path, f"{name.replace(' ', '-')}.tmp")
        os.mkdir(path)
        return path

    def record_task(self, pid):
        with open(os.path.join(self.path, TASKS_FILE), "a") as f:
            f.write(f"{pid} {start_time(pid) or 0}\n")

    def keep_logs(self):
        """Moves the tasks' logs to a directory of their own that stays when
        this one goes (the `KEPT_LOGS` newest of the temp dir stay); its path."""
        parent = os.path.dirname(self.path)
        kept = tempfile.mkdtemp(prefix=LOGS_PREFIX, dir=parent)
        for name in os.listdir(self.path):
            if name.endswith(".log"):  # A task still running writes on into it.
                os.rename(os.path.join(self.path, name), os.path.join(kept, name))
        older = sorted(
            (os.path.join(parent, n) for n in os.listdir(parent) if n.startswith(LOGS_PREFIX)),
            key=os.path.getmtime,
        )
        for path in older[:-KEPT_LOGS]:
            shutil.rmtree(path, ignore_errors=True)
        return kept

    def remove(self):
        shutil.rmtree(self.path, ignore_errors=True)


def reap_abandoned(directory=None):
    """Removes the cluster directories in `directory` (default: the temp dir)
    whose owner process is gone, after killing their tasks that still run.
    Returns the paths removed."""
    directory = directory or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _NAME.match(name)
        if match is None or _runs(int(match.group(1)), match.group(2)):
            continue
        path = os.path.join(directory, name)
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
        except OSError:
            continue
        try:
            with open(os.path.join(path, TASKS_FILE)) as f:
                tasks = [line.split() for line in f if line.strip()]
        except OSError:
            tasks = []
        for pid, started in tasks:
            if _runs(int(pid), started):
                try:  # Its own process group: reaches what it spawned.
                    os.killpg(int(pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            removed.append(path)
    return removed
