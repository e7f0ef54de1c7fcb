"""The zygote: one process per launch that imports TensorFlow once and forks the tasks (internal).

Importing TensorFlow costs a task process about 2.5 s of CPU; a launch of N
tasks paid it N times. Instead, `task.Zygote` starts one process the way a
task starts (`bootstrap --zygote`: same environment but for TF_CONFIG and
TMPDIR, inside the launch's private network), which imports TensorFlow and
the modules of the tasks' mains without running an op, says `Ready`, and then
forks one child per `Fork`. TensorFlow starts no runtime thread at import (no
context, no op: this module checks that before each fork, and refuses
otherwise), so the child starts as a fresh process would have been once it
had imported TensorFlow.

Each child starts a session of its own (the zygote answers `Forked` only once
it has, so the launcher can signal its process group at once), writes
stdout/stderr to the task's log, takes the task's environment, and runs
`bootstrap`'s task start with the zygote as its parent: the stack dump,
the parent-death signal and the orphan watchdog, SIGTERM, `Alive`, the main.

The zygote keeps each child unreaped after it ends and reports `Exited` with
its status; it reaps it on `Reap`, so the task's pid and process group id stay
taken until the launcher is done signalling them. It has no thread of its
own: it waits on its connection and on a pidfd per child, and looks each
`_POLL_S` whether its parent is gone. On `Exit`, on its connection closing or
once orphaned, it kills every child's process group, reaps them and exits;
its children die with it anyway (their parent-death signal).
"""

import importlib
import os
import select
import signal
import socket
import sys
import threading
import traceback
from multiprocessing import connection

from compat_distribute.testing.cluster import protocol

__all__ = ["FLAG", "serve"]

# `bootstrap`'s first argument that makes the process a zygote.
FLAG = "--zygote"
# How often the zygote looks whether its parent is gone.
_POLL_S = 0.5


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
    _Zygote(conn, parent, start_task, orphan_exit_code).serve()


class _Zygote:
    def __init__(self, conn, parent, start_task, orphan_exit_code):
        self._conn = conn
        # The same socket, for the descriptors that follow a Fork.
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
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        info = os.waitid(os.P_PID, pid, flags)
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
