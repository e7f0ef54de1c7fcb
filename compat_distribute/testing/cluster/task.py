"""One task of a local cluster: a Python process, launched, watched, stopped.

A task runs `python -c BOOTSTRAP`, which arms the SIGUSR1 stack dump, ties
the process's life to its parent's, says `Alive`, and then runs the `main(argv,
conn)` named in its `TaskSpec`: `worker` for the tasks that serve
`LocalCluster.run`, or any other main (a long-lived server, say) that speaks
`protocol` on `conn`: `Ready` once set up, then serves until `Exit`.

Stopping asks each task to exit (`Exit`); one still running `EXIT_GRACE_S`
later gets SIGTERM, on which the bootstrap ends it at once (a thread of its
own, so a main blocked inside TensorFlow ends too: its output flushed, a line
saying so in its log, exit status `SIGTERM_EXIT_CODE`, no destructors, which may
block on peers); what still runs `TERM_GRACE_S` later, and anything the task
spawned, is killed with its process group (SIGKILL).

The process runs in a session of its own (so killing its process group reaches
anything it spawned, and a Ctrl-C in the terminal reaches the parent alone),
writes stdout and stderr to a log file, and gets its own TMPDIR inside the
cluster's directory. It dies with its parent: by the parent-death signal on
Linux (SIGKILL, which also ends a stopped task), and on every platform by a
thread that ends the process once its parent is gone.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing import connection as mp_connection

from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster import tf_config

# argv: fd of the socket, parent pid, 1 to set the parent-death signal, the
# main ("module" or "module:function"), then main's own arguments. Nothing
# before `Alive` imports TensorFlow, so a task stuck importing it can still
# dump its stack.
BOOTSTRAP = """\
import faulthandler, os, signal, sys, threading, time
faulthandler.enable()
faulthandler.register(signal.SIGUSR1, all_threads=True)
fd, parent, death_signal, main = sys.argv[1:5]
if death_signal == "1":
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
def _exit_when_orphaned(parent):
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(70)
if os.getppid() != int(parent):
    os._exit(70)
threading.Thread(target=_exit_when_orphaned, args=(int(parent),), daemon=True).start()
_ending = threading.Lock()
def _end():
    if not _ending.acquire(blocking=False):
        return  # The handler or the thread below is ending the task already.
    sys.stdout.flush()
    sys.stderr.write(f"pid {os.getpid()} got SIGTERM: it ends now.\\n")
    sys.stderr.flush()
    os._exit(%(sigterm_exit_code)d)
def _on_sigterm(signum, frame):
    _end()  # Runs when the main thread runs Python; else the thread below acts.
def _end_on_sigterm(wakeup):
    while signal.SIGTERM not in os.read(wakeup, 64):
        pass
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        _end()  # Else the main installed a handler of its own: SIGTERM is its business.
wakeup, woken = os.pipe()
os.set_blocking(woken, False)
signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
signal.signal(signal.SIGTERM, _on_sigterm)
threading.Thread(target=_end_on_sigterm, args=(wakeup,), daemon=True).start()
os.set_inheritable(int(fd), False)
from multiprocessing import connection
from compat_distribute.testing.cluster import protocol
conn = connection.Connection(int(fd))
conn.send(protocol.Alive(os.getpid()))
import importlib
module, _, function = main.partition(":")
sys.exit(getattr(importlib.import_module(module), function or "main")(sys.argv[5:], conn))
""" % {"sigterm_exit_code": report.SIGTERM_EXIT_CODE}
# The bootstrap's watchdog threads: in every stack dump, saying nothing.
WATCHDOG_FRAMES = ("_exit_when_orphaned", "_end_on_sigterm")
# How long a stack dump (SIGUSR1) may take to appear in the tasks' logs.
STACK_DUMP_WAIT_S = 2.0
# How long a task asked to exit (or dying) may take before it gets SIGTERM.
EXIT_GRACE_S = 2.0
# How long a task may take to end after SIGTERM before it is killed (SIGKILL).
TERM_GRACE_S = 2.0
# How often stopping looks whether the tasks it signalled have ended.
_EXIT_POLL_S = 0.01


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


def bootstrap_command(spec: TaskSpec, fd: int) -> list[str]:
    """The command line that runs `spec` in a fresh Python, talking on `fd`."""
    # The parent-death signal fires when the thread that forked the task ends:
    # only the main thread lives as long as this process.
    death_signal = sys.platform.startswith("linux") and (
        threading.current_thread() is threading.main_thread()
    )
    return [
        sys.executable,
        "-c",
        BOOTSTRAP,
        str(fd),
        str(os.getpid()),
        "1" if death_signal else "0",
        spec.main,
        *spec.argv,
    ]


class Task:
    """A launched task process and the parent's end of its connection."""

    def __init__(self, spec: TaskSpec, *, log_path, network=None, command=None):
        """Launches `spec`; `network`: a `netns.PrivateNetwork` to run in;
        `command(spec, argv) -> argv` may replace the command (see LaunchHooks)."""
        self.spec = spec
        self.log_path = log_path
        self.alive = False  # Said Alive: its SIGUSR1 stack dump is armed.
        self.ready = False  # Its main is set up.
        parent_end, child_end = socket.socketpair()
        argv = bootstrap_command(spec, child_end.fileno())
        if command is not None:
            argv = list(command(spec, argv))
        pass_fds = (child_end.fileno(), *spec.pass_fds)
        if network is not None:
            argv = network.enter(argv)
            pass_fds += network.fds
        try:
            with open(log_path, "wb") as log:
                self.process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=spec.env,
                    pass_fds=pass_fds,
                    start_new_session=True,
                )
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
        self.conn.close()


def launch_all(specs, *, workdir, network, hooks):
    """Launches a `Task` per spec; on any failure kills what started, re-raises."""
    tasks = []
    try:
        for spec in specs:
            task = Task(
                spec,
                log_path=workdir.log_path(spec.name),
                network=network,
                command=hooks.command,
            )
            tasks.append(task)
            workdir.record_task(task.pid)
            if hooks.on_launch is not None:
                hooks.on_launch(spec.name, task.pid)
    except BaseException:
        for task in tasks:
            task.kill()
        for task in tasks:
            task.reap()
        raise
    return tasks


# -- Groups of tasks: what a cluster (or a pod's hosts) does with its tasks ---


def wait_ready(tasks, timeout):
    """Waits until every task said Ready; raises the error naming the task that
    died, failed or did not start within `timeout` seconds (with stacks)."""
    deadline = time.monotonic() + timeout
    while not all(t.ready for t in tasks):
        waiting = [t for t in tasks if not t.ready]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            stacks = dump_stacks(tasks)
            stopped = {t.name for t in tasks if t.stopped()}
            raise report.start_timeout(timeout, tasks, waiting, stacks, stopped)
        for conn in mp_connection.wait([t.conn for t in waiting], remaining):
            task = next(t for t in waiting if t.conn is conn)
            try:
                message = conn.recv()
            except (EOFError, OSError):
                raise report.start_died(task, task.wait(EXIT_GRACE_S)) from None
            if isinstance(message, protocol.Alive):
                task.alive = True
            elif isinstance(message, protocol.Ready):
                task.ready = True
            elif isinstance(message, protocol.StartupFailed):
                raise report.start_failed(task, message.traceback)


def dump_stacks(tasks):
    """{task name: Python stacks} from the tasks that can dump them (SIGUSR1);
    a stopped task cannot, and is left out."""
    starts = {t.name: t.output_size() for t in tasks}
    live = [t for t in tasks if not t.stopped() and t.request_stack_dump()]
    # faulthandler writes from the signal handler, in one burst per task.
    deadline = time.monotonic() + STACK_DUMP_WAIT_S
    sizes = {}
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        now = {t.name: t.output_size() for t in live}
        if all(now[n] > starts[n] for n in now) and now == sizes:
            break
        sizes = now
    return {
        t.name: _drop_watchdog(t.output(starts[t.name])) or "(no dump: it did not answer SIGUSR1)"
        for t in live
    }


def _drop_watchdog(dump):
    threads = dump.strip().split("\n\n")
    return "\n\n".join(t for t in threads if not any(f in t for f in WATCHDOG_FRAMES))


def stop_all(tasks, *, graceful):
    """Stops `tasks`: asks them to exit first when `graceful`; SIGTERM to the
    process group of each one that neither answered nor ended (a stopped task
    cannot act on it), SIGKILL to every group after `TERM_GRACE_S` at most,
    then reaps every process."""
    answered = set()
    if graceful:
        for t in tasks:
            t.ask_to_exit()
        deadline = time.monotonic() + EXIT_GRACE_S
        for t in tasks:
            # Wait for the task to close its end, without reaping it: the
            # process group id stays valid for the signals below.
            try:
                if t.conn.poll(max(0.0, deadline - time.monotonic())):
                    t.conn.recv()
            except (EOFError, OSError):
                answered.add(t.name)
    running = [t for t in tasks if t.name not in answered and not t.has_exited()]
    terminated = [t for t in running if not t.stopped()]
    for t in terminated:
        t.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    while any(not t.has_exited() for t in terminated) and time.monotonic() < deadline:
        time.sleep(_EXIT_POLL_S)
    for t in tasks:
        t.kill()
    for t in tasks:
        t.reap()
