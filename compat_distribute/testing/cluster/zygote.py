"""The zygote: one process per launch that imports TensorFlow once and forks the tasks (internal).

Both ends of its protocol live here. The launcher's end, `Zygote`, starts it as
a task starts (`bootstrap --zygote`: the tasks' environment but for `LATE_ENV`,
in the launch's network); `serve` (the zygote's end) imports TensorFlow and the
mains' modules without running an op, says `Ready`, then forks a child per
`Fork`. Each child takes a session, log and environment of its own and runs
bootstrap's task start; the zygote reports `Exited` when it ends and reaps it
only on `Reap`, so its pid and process group stay the launcher's to signal.
It forks only while no TensorFlow runtime and no second thread exist in it
(`unsafe_to_fork`): docs/clusters.md, "One TensorFlow import per launch".
"""

from __future__ import annotations

import importlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing import connection

from compat_distribute import _env
from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster import task as task_lib

__all__ = ["ENV_VAR", "FLAG", "LATE_ENV", "NAME", "Zygote", "forkable", "serve", "start", "wanted"]

# `bootstrap`'s first argument that makes the process a zygote.
FLAG = "--zygote"
# Its name in logs, errors and `LaunchHooks.on_launch`.
NAME = "zygote"
# "0" starts every task as a fresh process; "1" (the default) forks them from a zygote.
ENV_VAR = "COMPAT_DISTRIBUTE_ZYGOTE"
# What a task's environment may hold apart from its zygote's: variables read
# once the task runs (TensorFlow reads TF_CONFIG when a strategy or server is
# made), never at import.
LATE_ENV = ("TF_CONFIG", "TMPDIR")
# How often the zygote looks whether its parent is gone.
_POLL_S = 0.5
# How long the zygote may take to answer a Fork or a Reap (scaled).
_ANSWER_S = 30.0
# How long init may take to reap a task whose zygote died (scaled).
_ORPHAN_REAP_S = 5.0


def wanted(environ=None) -> bool:
    """Whether launches may fork their tasks from a zygote ($COMPAT_DISTRIBUTE_ZYGOTE)."""
    return _env.read(ENV_VAR, environ) and hasattr(os, "pidfd_open")


def forkable(spec: task_lib.TaskSpec, env) -> bool:
    """Whether a zygote started with `env` may fork `spec`'s task: its
    environment differs at most in `LATE_ENV`, and it inherits no descriptor."""

    def early(environment):
        return {k: v for k, v in environment.items() if k not in LATE_ENV}

    return not spec.pass_fds and early(spec.env) == early(env)


# -- The launcher's end --------------------------------------------------------


def start(mains, *, env, workdir, network, on_launch, start_timeout):
    """A ready `Zygote` for the launch in `workdir`: its pid recorded there and
    given to `on_launch` (or None) as "zygote"."""
    zygote = Zygote(mains, env=env, log_path=workdir.log_path(NAME), network=network)
    try:
        workdir.record_task(zygote.pid)
        if on_launch is not None:
            on_launch(NAME, zygote.pid)
        zygote.wait_ready(deadlines.scaled(start_timeout), deadlines.describe(start_timeout))
    except BaseException:
        zygote.stop(0)
        raise
    return zygote


class _Forked:
    """A task the zygote forked, as `task.FreshProcess` shows a child: it ended
    once its pidfd is readable; its status comes from the zygote."""

    def __init__(self, pid, zygote):
        self.pid = pid
        self.returncode = None
        self.zygote = zygote
        self.pidfd = os.pidfd_open(pid)  # Unreaped by the zygote: still this process.

    def has_exited(self):
        pidfd = self.pidfd  # None once released (another thread may release it).
        return pidfd is None or bool(select.select([pidfd], [], [], 0)[0])

    def poll(self):
        if self.returncode is None:
            self.returncode = self.zygote.status(self)
        return self.returncode

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            self.zygote.wait_for_news(self, remaining)
        return self.returncode

    def release(self):
        self.zygote.reap(self)


class Zygote:
    """The launcher's end of a launch's zygote: a fresh process, started as a
    task is, that forks the tasks whose `forkable` says so."""

    def __init__(self, mains, *, env, log_path, network):
        """Starts it; `mains`: the modules (or "module:function") to import
        before forking; `env`: its environment, also the tasks' but for LATE_ENV."""
        self.env = dict(env)
        self.log_path = log_path
        self._statuses = {}  # pid -> exit status, as the zygote reported them.
        self._gone = False  # Its connection closed: it died or exited.
        parent_end, child_end = socket.socketpair()
        argv = [*task_lib.bootstrap_prefix(child_end.fileno()), FLAG, *sorted(set(mains))]
        try:
            with open(log_path, "ab") as log:
                self.process = task_lib.start_process(
                    argv, self.env, log, (child_end.fileno(),), network
                )
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()
        self.conn = connection.Connection(parent_end.detach())
        # The same socket, for the descriptors that follow a Fork.
        self._carrier = socket.socket(fileno=os.dup(self.conn.fileno()))

    @property
    def pid(self):
        return self.process.pid

    def output(self, start=0):
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")

    def can_fork(self, spec):
        return forkable(spec, self.env)

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

    def fork(self, spec: task_lib.TaskSpec, task_end, log) -> _Forked:
        """Forks `spec`'s task, talking on `task_end`, writing to the file `log`
        (a `task.Task` starter, as `task.start_fresh`)."""
        try:
            self.conn.send(protocol.Fork(spec.main, tuple(spec.argv), dict(spec.env)))
            socket.send_fds(self._carrier, [b"f"], [task_end.fileno(), log.fileno()])
        except OSError:
            self._gone = True
        message = self._next(deadlines.scaled(_ANSWER_S))
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

    def death_of(self, process):
        """How the zygote ended, when it forked `process` and is dead, else ""."""
        if getattr(process, "zygote", None) is not self or self.process.poll() is None:
            return ""
        return (
            f", as the zygote that forked it (pid {self.pid}) "
            f"{report.exit_reason(self.process.poll())}"
        )

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
        if None not in waited:
            select.select(waited, [], [], timeout)

    def reap(self, task):
        """Has the zygote reap the ended `task` (its pid is then free)."""
        pidfd, task.pidfd = task.pidfd, None  # Never select a closed (or reused) fd.
        if pidfd is None:
            return  # Released already.
        os.close(pidfd)
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
        deadline = time.monotonic() + deadlines.scaled(_ANSWER_S)
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
            code = self.process.wait(timeout=deadlines.scaled(_ANSWER_S))
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


# -- The zygote's end ------------------------------------------------------------


def unsafe_to_fork():
    """Why forking this process would be wrong, or None."""
    threads = threading.enumerate()
    if len(threads) != 1:
        names = ", ".join(t.name for t in threads)
        return f"it runs {len(threads)} Python threads ({names}), and a fork keeps only one"
    if "tensorflow" in sys.modules:
        from compat_distribute.testing import _tf  # pylint: disable=g-import-not-at-top

        if _tf.context_safe() is not None:
            return (
                "TensorFlow's runtime is initialised in it (an eager context exists: an op "
                "ran or a context was made, e.g. at the import of a main's module), and a "
                "fork would copy that runtime without its threads"
            )
    return None


def serve(fd, parent, mains, start_task, orphan_exit_code):
    """The zygote's life (never returns): imports, says Ready on `fd`, then forks
    a child per `Fork`; each child runs `start_task(fd, zygote pid, main, argv)`."""
    conn = connection.Connection(fd)
    os.set_inheritable(fd, False)
    try:
        import tensorflow  # pylint: disable=g-import-not-at-top,unused-import

        for main in mains:
            try:
                importlib.import_module(main.partition(":")[0])
            except Exception:  # pylint: disable=broad-except
                pass  # The task imports it again, and reports what fails.
    except BaseException:  # pylint: disable=broad-except
        conn.send(protocol.StartupFailed(traceback.format_exc()))
        os._exit(1)
    conn.send(protocol.Ready(os.getpid()))
    _Server(conn, parent, start_task, orphan_exit_code).serve()


class _Server:
    """The zygote's loop: no thread of its own; it waits on its connection and a
    pidfd per child, and looks each `_POLL_S` whether its parent is gone."""

    def __init__(self, conn, parent, start_task, orphan_exit_code):
        self._conn = conn
        self._carrier = socket.socket(fileno=os.dup(conn.fileno()))
        self._parent = parent
        self._start_task = start_task
        self._orphan_exit_code = orphan_exit_code
        self._children = {}  # pid -> pidfd, until reaped.
        self._running = {}  # pidfd -> pid, until reported Exited.

    def serve(self):
        while True:
            readable, _, _ = select.select([self._conn, *self._running], [], [], _POLL_S)
            if os.getppid() != self._parent:
                self._end(self._orphan_exit_code)
            for pidfd in readable:
                if pidfd in self._running:
                    self._report(pidfd)
            if self._conn not in readable:
                continue
            try:
                message = self._conn.recv()
            except (EOFError, OSError):  # The launcher went away.
                self._end(0)
            if isinstance(message, protocol.Fork):
                self._fork(message)
            elif isinstance(message, protocol.Reap):
                self._reap(message.pid)
            elif isinstance(message, protocol.Exit):
                self._end(0)

    def _report(self, pidfd):
        pid = self._running.pop(pidfd)
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None:  # Not ended after all.
            self._running[pidfd] = pid
            return
        ended = info.si_code == os.CLD_EXITED
        self._conn.send(protocol.Exited(pid, info.si_status if ended else -info.si_status))

    def _reap(self, pid):
        pidfd = self._children.pop(pid, None)
        if pidfd is not None:
            if pidfd in self._running:  # Asked to reap a live child: kill it first.
                del self._running[pidfd]
                _kill_group(pid)
            os.waitpid(pid, 0)
            os.close(pidfd)
        self._conn.send(protocol.Reaped(pid))

    def _end(self, code):
        for pid in self._children:
            _kill_group(pid)
        for pid in self._children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        os._exit(code)

    def _fork(self, message):
        _, fds, _, _ = socket.recv_fds(self._carrier, 1, 2)
        task_fd, log_fd = fds
        try:
            reason = unsafe_to_fork()
            if reason is not None:
                self._conn.send(protocol.ForkRefused(reason))
                return
            sys.stdout.flush()
            sys.stderr.flush()
            in_session, session_made = os.pipe()
            zygote = os.getpid()
            pid = os.fork()
            if pid == 0:
                self._child(message, task_fd, log_fd, (in_session, session_made), zygote)
            os.close(session_made)
            os.read(in_session, 1)  # End of file once the child has its session (or died).
            os.close(in_session)
            pidfd = os.pidfd_open(pid)
            self._children[pid] = pidfd
            self._running[pidfd] = pid
            self._conn.send(protocol.Forked(pid))
        finally:
            os.close(task_fd)
            os.close(log_fd)

    def _child(self, message, task_fd, log_fd, pipe, zygote):
        """The forked task (never returns)."""
        try:
            os.setsid()
            for fd in pipe:
                os.close(fd)
            self._conn.close()
            self._carrier.close()
            for pidfd in self._children.values():
                os.close(pidfd)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.close(log_fd)
            os.environ.clear()
            os.environ.update(message.env)
            _forget_what_the_zygote_read()
            sys.argv = [sys.argv[0], str(task_fd), str(zygote), "1", message.main, *message.argv]
            self._start_task(task_fd, zygote, message.main, list(message.argv))
        except BaseException:  # pylint: disable=broad-except
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(1)


def _forget_what_the_zygote_read():
    """State read from the zygote's environment that a fresh task reads from its own."""
    import tempfile  # pylint: disable=g-import-not-at-top

    tempfile.tempdir = None  # Cached from the zygote's TMPDIR once asked.
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # Each fresh process seeds its own.
        numpy.random.seed()


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
