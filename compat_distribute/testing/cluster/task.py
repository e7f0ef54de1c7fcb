"""One task process (internal): `TaskSpec` says what to run, `Task` is the running process.

Only `launcher` starts tasks. A task runs `bootstrap` (`python -m`), which arms
the SIGUSR1 stack dump, ties the process's life to its parent's, says `Alive`,
and then runs the `main(argv, conn)` named in its `TaskSpec`: `worker` for the
tasks that serve `LocalCluster.run`, `server` for a pod's hosts, `relay`, or
any other main that speaks `protocol` on `conn`: `Ready` once set up, then
serves until `Exit`.

The process runs in a session of its own (so killing its process group reaches
anything it spawned, and a Ctrl-C in the terminal reaches the parent alone),
writes stdout and stderr to a log file, and gets its own TMPDIR inside the
launch's directory. It dies with its parent: by the parent-death signal on
Linux (SIGKILL, which also ends a stopped task), and on every platform by a
thread that ends the process once its parent is gone. How a group of tasks is
stopped (Exit, SIGTERM, SIGKILL) is `launcher.stop_all`.

A task may instead be forked by its launch's `Zygote` (see `zygote`), which
imported TensorFlow once for every task of the launch. It is then this
process's grandchild, with the same guarantees: its own session, log, TMPDIR
and bootstrap start, tied to the zygote's life as the zygote is to this
process's. It is watched through a pidfd (`_Forked`); its exit status comes
from the zygote, which reaps it only when told (`Reap`), so its pid and group
id stay ours to signal until then.
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing import connection as mp_connection

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster import tf_config
from compat_distribute.testing.cluster import zygote as zygote_lib

__all__ = ["BOOTSTRAP", "LATE_ENV", "Task", "TaskSpec", "WATCHDOG_FRAMES", "Zygote", "forkable"]

# The module every task runs first, with `python -m` (see there).
BOOTSTRAP = "compat_distribute.testing.cluster.bootstrap"
# Its watchdog threads' functions: in every stack dump, saying nothing.
WATCHDOG_FRAMES = ("_exit_when_orphaned", "_end_on_sigterm")
# What a task's environment may hold apart from its zygote's: variables read
# once the task runs (TensorFlow reads TF_CONFIG when a strategy or server is
# made), never at import.
LATE_ENV = ("TF_CONFIG", "TMPDIR")
# How long the zygote may take to answer a Fork or a Reap (scaled).
_ZYGOTE_ANSWER_S = 30.0
# How long init may take to reap a task whose zygote died (scaled).
_ORPHAN_REAP_S = 5.0


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


def _parent_args(fd):
    # The parent-death signal fires when the thread that forked the task ends:
    # only the main thread lives as long as this process.
    death_signal = sys.platform.startswith("linux") and (
        threading.current_thread() is threading.main_thread()
    )
    return [str(fd), str(os.getpid()), "1" if death_signal else "0"]


def bootstrap_command(spec: TaskSpec, fd: int) -> list[str]:
    """The command line that runs `spec` in a fresh Python, talking on `fd`."""
    return [sys.executable, "-m", BOOTSTRAP, *_parent_args(fd), spec.main, *spec.argv]


class Task:
    """A launched task process and the parent's end of its connection."""

    def __init__(self, spec: TaskSpec, *, log_path, network=None, command=None, zygote=None):
        """Launches `spec`; `network`: a `netns.PrivateNetwork` to run in;
        `command(spec, argv) -> argv` may replace the command (see LaunchHooks);
        `zygote`: a ready `Zygote` that forks the task (see `forkable`), in
        place of a fresh process (and of `network` and `command`)."""
        self.spec = spec
        self.log_path = log_path
        self.alive = False  # Said Alive: its SIGUSR1 stack dump is armed.
        self.ready = False  # Its main is set up.
        self.zygote = zygote
        parent_end, child_end = socket.socketpair()
        try:
            if zygote is not None:
                self.process = zygote.fork(spec, child_end, log_path)
            else:
                self.process = _popen(spec, child_end, log_path, network, command)
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
    def forked(self) -> bool:
        """Whether the zygote forked it (else it is a fresh process, a child of this one)."""
        return self.zygote is not None

    @property
    def task_type(self):
        return self.spec.task_type

    @property
    def task_id(self):
        return self.spec.task_id

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
        """Whether the process ended, without reaping it (its group id stays ours)."""
        if self.process.returncode is not None:
            return True
        if self.zygote is not None:
            return self.process.has_exited()
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            return os.waitid(os.P_PID, self.pid, flags) is not None
        except ChildProcessError:  # Reaped already.
            return True

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
        """Waits for the killed process; says so when it does not die."""
        if self.wait(timeout=10) is None:  # Unkillable (D state).
            print(
                f"local_cluster: {self.name} (pid {self.pid}) did not die after SIGKILL.",
                file=sys.stderr,
            )
        elif self.zygote is not None:
            self.zygote.reap(self.process)
        self.conn.close()


def _popen(spec, child_end, log_path, network, command):
    argv = bootstrap_command(spec, child_end.fileno())
    if command is not None:
        argv = list(command(spec, argv))
    return _start(argv, spec.env, log_path, (child_end.fileno(), *spec.pass_fds), network)


def _start(argv, env, log_path, pass_fds, network):
    """A fresh process in a session of its own, in `network`, writing to `log_path`."""
    if network is not None:
        argv = network.enter(argv)
        pass_fds += network.fds
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            pass_fds=pass_fds,
            start_new_session=True,
        )


def forkable(spec: TaskSpec, env) -> bool:
    """Whether a zygote started with `env` may fork `spec`'s task: its
    environment differs at most in `LATE_ENV`, and it inherits no descriptor."""

    def early(environment):
        return {k: v for k, v in environment.items() if k not in LATE_ENV}

    return not spec.pass_fds and early(spec.env) == early(env)


class _Forked:
    """A task the zygote forked, as `subprocess.Popen` shows a child: `pid`,
    `returncode`, `poll`, `wait`; it ended once its pidfd is readable, and its
    status comes from the zygote."""

    def __init__(self, pid, zygote):
        self.pid = pid
        self.returncode = None
        self.pidfd = os.pidfd_open(pid)  # Unreaped by the zygote: still this process.
        self._zygote = zygote

    def has_exited(self):
        return bool(select.select([self.pidfd], [], [], 0)[0])

    def poll(self):
        if self.returncode is None:
            self.returncode = self._zygote.status(self)
        return self.returncode

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            self._zygote.wait_for_news(self, remaining)
        return self.returncode


class Zygote:
    """The launcher's end of a launch's zygote (see `zygote`): a fresh process,
    started as a task is, that forks the tasks whose `forkable` says so."""

    NAME = "zygote"

    def __init__(self, mains, *, env, log_path, network=None):
        """Starts it; `mains`: the modules (or "module:function") to import
        before forking; `env`: its environment, also the tasks' but for LATE_ENV."""
        self.env = dict(env)
        self.log_path = log_path
        self._statuses = {}  # pid -> exit status, as the zygote reported them.
        self._gone = False  # Its connection closed: it died or exited.
        parent_end, child_end = socket.socketpair()
        argv = [sys.executable, "-m", BOOTSTRAP, zygote_lib.FLAG]
        argv += [*_parent_args(child_end.fileno()), *sorted(set(mains))]
        try:
            self.process = _start(argv, self.env, log_path, (child_end.fileno(),), network)
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()
        self.conn = mp_connection.Connection(parent_end.detach())
        # The same socket, for the descriptors that follow a Fork.
        self._carrier = socket.socket(fileno=os.dup(self.conn.fileno()))

    @property
    def pid(self):
        return self.process.pid

    def output(self, start=0):
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")

    # -- Start-up and forks --------------------------------------------------

    def wait_ready(self, timeout, limit_words):
        """Waits for Ready; raises the error naming the zygote when it failed,
        died, or did not answer within `timeout` seconds (`limit_words`: as
        `deadlines.describe` words it)."""
        deadline = time.monotonic() + timeout
        while True:
            message = self._next(deadline - time.monotonic())
            if isinstance(message, protocol.Ready):
                return
            if isinstance(message, protocol.StartupFailed):
                raise report.zygote_failed(self, message.traceback)
            if message is None:
                if self._gone:
                    raise self._died("during start-up")
                raise report.zygote_timeout(self, limit_words, self._stack())

    def fork(self, spec: TaskSpec, task_end, log_path) -> _Forked:
        """Forks `spec`'s task, talking on `task_end`, writing to `log_path`."""
        with open(log_path, "wb") as log:
            try:
                self.conn.send(protocol.Fork(spec.main, tuple(spec.argv), dict(spec.env)))
                socket.send_fds(self._carrier, [b"f"], [task_end.fileno(), log.fileno()])
            except OSError:
                self._gone = True
        message = self._next(deadlines.scaled(_ZYGOTE_ANSWER_S))
        if isinstance(message, protocol.Forked):
            return _Forked(message.pid, self)
        if isinstance(message, protocol.ForkRefused):
            raise report.zygote_refused(self, spec.name, message.reason)
        raise self._died(f"while forking {spec.name}")

    def check(self, when):
        """Raises the error naming the zygote if it has died."""
        error = self.failure(when)
        if error is not None:
            raise error

    def failure(self, when):
        """The error naming the zygote if it has died (`when` it did), else None."""
        return None if self.process.poll() is None else self._died(when)

    # -- Exit statuses -------------------------------------------------------

    def status(self, task):
        """The exit status of the forked `task`, or None while it runs. A task
        whose zygote died unreported was killed with it (parent-death signal)."""
        self._take_news()
        if task.pid in self._statuses:
            return self._statuses[task.pid]
        if self._gone and task.has_exited():
            return -signal.SIGKILL
        return None

    def wait_for_news(self, task, timeout):
        """Sleeps until the zygote says something or, once it is gone, `task` ends."""
        waited = [task.pidfd] if self._gone else [self.conn]
        select.select(waited, [], [], timeout)

    def reap(self, task):
        """Has the zygote reap the ended `task` (its pid is then free)."""
        os.close(task.pidfd)
        if self._gone:  # Its children went to init: wait (bounded) until it reaped this one.
            deadline = time.monotonic() + deadlines.scaled(_ORPHAN_REAP_S)
            while os.path.exists(f"/proc/{task.pid}") and time.monotonic() < deadline:
                time.sleep(0.01)
            return
        try:
            self.conn.send(protocol.Reap(task.pid))
        except OSError:
            self._gone = True
            return
        deadline = time.monotonic() + deadlines.scaled(_ZYGOTE_ANSWER_S)
        while not isinstance(self._next(deadline - time.monotonic()), protocol.Reaped):
            if self._gone or time.monotonic() >= deadline:
                return

    def stop(self, grace):
        """Asks it to exit (it kills and reaps what it forked), kills it after
        `grace` seconds, reaps it."""
        try:
            self.conn.send(protocol.Exit())
        except OSError:
            pass
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._carrier.close()
        self.conn.close()

    # -- Its connection --------------------------------------------------------

    def _take_news(self):
        while not self._gone and self.conn.poll(0):
            message = self._next(0)
            if message is not None:
                raise AssertionError(f"the zygote said {message!r} unasked")

    def _next(self, timeout):
        """Its next message other than Exited (None: none within `timeout`, or
        it is gone); Exited statuses are kept."""
        deadline = time.monotonic() + max(0.0, timeout)
        while not self._gone:
            if not self.conn.poll(max(0.0, deadline - time.monotonic())):
                return None
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                self._gone = True
                return None
            if not isinstance(message, protocol.Exited):
                return message
            self._statuses[message.pid] = message.status
        return None

    def _died(self, when):
        try:
            code = self.process.wait(timeout=deadlines.scaled(_ZYGOTE_ANSWER_S))
        except subprocess.TimeoutExpired:
            code = None
        return report.zygote_died(self, code, when)

    def _stack(self):
        start = os.path.getsize(self.log_path)
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return "(none: it is gone)"
        deadline = time.monotonic() + deadlines.scaled(2.0)
        while time.monotonic() < deadline and os.path.getsize(self.log_path) == start:
            time.sleep(0.05)
        time.sleep(0.1)  # faulthandler writes in one burst.
        return self.output(start) or "(no dump: it did not answer SIGUSR1)"
