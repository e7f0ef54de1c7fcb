"""One task process (internal): `TaskSpec` says what to run, `Task` is the running process.

Only `launcher` starts tasks. A task runs `bootstrap` (`python -m`), which arms
the SIGUSR1 stack dump, ties the process's life to its parent's, says `Alive`,
and then runs the `main(argv, conn)` its `TaskSpec` names (`worker`, `server`,
`relay`, or any main that says `protocol.Ready` and serves until `Exit`).

A task runs in a session of its own (killing its process group reaches what
it spawned; a Ctrl-C in the terminal reaches the parent alone), appends its
stdout and stderr to its log, and dies with its parent. How it starts is the
launcher's choice of starter: `start_fresh` (a child of this process) or a
zygote's fork; a `Task` sees only the process handle the starter returns
(`pid`, `returncode`, `poll`, `wait`, `has_exited`, `release`).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing import connection as mp_connection

from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import tf_config

__all__ = [
    "BOOTSTRAP",
    "FreshProcess",
    "Task",
    "TaskSpec",
    "WATCHDOG_FRAMES",
    "bootstrap_prefix",
    "start_fresh",
    "start_process",
]

# The module every task runs first, with `python -m` (see there).
BOOTSTRAP = "compat_distribute.testing.cluster.bootstrap"
# Its watchdog threads' functions: in every stack dump, saying nothing.
WATCHDOG_FRAMES = ("_exit_when_orphaned", "_end_on_sigterm")


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """What to launch for one task.

    main: "module" whose `main(argv, conn) -> exit status` runs in the task,
        or "module:function" for another function of that signature.
    argv: that main's arguments.
    env: the task's whole environment (TF_CONFIG included).
    pass_fds: descriptors of this process the task inherits (same numbers).
    label: the name of a process that is no task of the cluster's spec (a
        relay, say), in place of "<task_type> <task_id>".
    """

    task_type: str
    task_id: int
    main: str
    argv: tuple[str, ...] = ()
    env: dict = dataclasses.field(default_factory=dict)
    pass_fds: tuple[int, ...] = ()
    label: str = ""

    @property
    def name(self):
        return self.label or tf_config.task_name(self.task_type, self.task_id)


def bootstrap_prefix(fd: int) -> list[str]:
    """`python -m bootstrap FD PARENT DEATH_SIGNAL`: what every task's and
    zygote's command line starts with (see `bootstrap`)."""
    # The parent-death signal fires when the thread that forked the task ends:
    # only the main thread lives as long as this process.
    death_signal = sys.platform.startswith("linux") and (
        threading.current_thread() is threading.main_thread()
    )
    return [sys.executable, "-m", BOOTSTRAP, str(fd), str(os.getpid()), "1" if death_signal else "0"]


class Task:
    """A launched task process and the parent's end of its connection."""

    def __init__(self, spec: TaskSpec, *, log_path, start):
        """Launches `spec`: `start(spec, task_end, log) -> process handle`
        (`start_fresh`, or a zygote's fork) with the task's end of its socket
        and its log file open for appending (a restart writes after the
        output of the task's earlier processes)."""
        self.spec = spec
        self.log_path = log_path
        self.alive = False  # Said Alive: its SIGUSR1 stack dump is armed.
        self.ready = False  # Its main is set up.
        parent_end, child_end = socket.socketpair()
        try:
            with open(log_path, "ab") as log:
                self.output_start = log.tell()  # Where this process's output begins.
                self.process = start(spec, child_end, log)
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()
        self.conn = mp_connection.Connection(parent_end.detach())

    @property
    def name(self):
        return self.spec.name

    @property
    def task_type(self):
        return self.spec.task_type

    @property
    def task_id(self):
        return self.spec.task_id

    @property
    def key(self):
        return self.spec.task_type, self.spec.task_id

    @property
    def pid(self):
        return self.process.pid

    # -- Watching ------------------------------------------------------------

    def output(self, start=0) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")

    def output_size(self) -> int:
        return os.path.getsize(self.log_path)

    def exitcode(self):
        """Its exit status (negative: killed by that signal), None while it runs."""
        return self.process.poll()

    def stopped(self) -> bool:
        """Whether it is stopped (SIGSTOP, SIGTSTP, a debugger): it cannot answer."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
        except (OSError, IndexError):
            return False

    def request_stack_dump(self) -> bool:
        """Asks the task to write its Python stacks to its log (SIGUSR1)."""
        if not self.alive or self.exitcode() is not None:
            return False
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return False
        return True

    # -- Stopping ------------------------------------------------------------

    def wait(self, timeout):
        """Its exit status within `timeout` seconds, or None."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def has_exited(self) -> bool:
        """Whether the process ended, without reaping it (its group id stays ours);
        safe to ask from any thread."""
        return self.process.returncode is not None or self.process.has_exited()

    def ask_to_exit(self):
        try:
            self.conn.send_bytes(protocol.dumps(protocol.Exit()))
        except (OSError, ValueError):
            pass

    def signal_group(self, signum):
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self):
        """SIGKILL to its process group (the task and whatever it spawned).

        start_new_session made the task's pid its group id; Linux keeps that id
        reserved while any member lives, even once the task itself was reaped,
        so this reaches what it spawned and no stranger.
        """
        self.signal_group(signal.SIGKILL)

    def reap(self):
        """Waits for the killed process; says so when it does not die. Once."""
        if self.conn.closed:
            return
        if self.wait(timeout=10) is None:  # Unkillable (D state).
            print(
                f"local_cluster: {self.name} (pid {self.pid}) did not die after SIGKILL.",
                file=sys.stderr,
            )
        else:
            self.process.release()
        self.conn.close()


class FreshProcess(subprocess.Popen):
    """A task started as a child of this process (`start_fresh`)."""

    def has_exited(self):
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            return os.waitid(os.P_PID, self.pid, flags) is not None
        except ChildProcessError:  # Reaped already.
            return True

    def release(self):
        """Nothing to do: `wait` reaped it."""


def start_fresh(spec, task_end, log, *, network, command=None):
    """A `Task` starter: `spec` in a fresh Python, in `network` (a `netns`
    network); `command(spec, argv) -> argv` may replace its command line."""
    argv = [*bootstrap_prefix(task_end.fileno()), spec.main, *spec.argv]
    if command is not None:
        argv = list(command(spec, argv))
    return start_process(argv, spec.env, log, (task_end.fileno(), *spec.pass_fds), network)


def start_process(argv, env, log, pass_fds, network):
    """A fresh process in a session of its own, in `network`, writing to the file `log`."""
    argv, pass_fds = network.enter(argv, pass_fds)
    return FreshProcess(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        pass_fds=pass_fds,
        start_new_session=True,
    )
