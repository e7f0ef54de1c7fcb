"""`Launcher`: the one place that starts, watches and stops a group of task processes (internal).

A `LocalCluster` (workers that run functions) and a `LocalServers` (a fake
pod's hosts, and their relay) each own one `Launcher`; neither is the other.
A launch, as the owner writes it:

    with launcher.launching():              # stops what ran, opens the network and directory
        ports = launcher.pick_ports(n)
        launcher.spawn(task_specs, helper_specs)   # one `task.Task` per spec
        launcher.wait_ready()               # each said Ready, or the error naming the task

An error inside the block stops everything launched so far. Tasks start in the
launch's network (`netns.open_network`: the one object that knows it), forked
by the launch's zygote where `zygote` allows (not when `LaunchHooks.command`
replaces command lines), else as fresh processes. `respawn` starts one task
again from its spec. Stopping asks each process to exit, then SIGTERM, then
SIGKILL to its process group; every process is reaped, the network closed and
the directory removed. Launchers still running at exit are stopped, and so
are they when a SIGTERM ends this process (where SIGTERM had its default
action: see `_stop_on_sigterm`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import sys
import threading
import time
import weakref
from multiprocessing import connection as mp_connection

from compat_distribute import _env
from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import context
from compat_distribute.testing.cluster import netns
from compat_distribute.testing.cluster import ports
from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster import task as task_lib
from compat_distribute.testing.cluster import workdir as workdir_lib
from compat_distribute.testing.cluster import zygote as zygote_lib

__all__ = [
    "ENDING",
    "EXIT_GRACE_S",
    "Launcher",
    "STACK_DUMP_WAIT_S",
    "TERM_GRACE_S",
    "dump_stacks",
    "running_launchers",
    "stop_all",
    "wait_ready",
]

# How long a stack dump (SIGUSR1) may take to appear in the tasks' logs (scaled).
STACK_DUMP_WAIT_S = 2.0
# How long a task asked to exit (or dying) may take before it gets SIGTERM.
EXIT_GRACE_S = 2.0
# How long a task may take to end after SIGTERM before it is killed (SIGKILL).
TERM_GRACE_S = 2.0
# How often stopping looks whether the tasks it signalled have ended.
_EXIT_POLL_S = 0.01

_LIVE = weakref.WeakSet()
# Set while a SIGTERM ends this process: what watches the tasks stands down.
ENDING = threading.Event()


@atexit.register
def _stop_live_launchers():
    for launcher in list(_LIVE):
        launcher.stop(graceful=True)


def _end_on_sigterm(signum, frame):
    """Stops every launch (processes, networks, directories), then ends this
    process by the SIGTERM it got, as its default action would have."""
    del frame
    ENDING.set()
    for launcher in list(_LIVE):
        launcher.stop(graceful=False)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _stop_on_sigterm():
    """Where SIGTERM would end this process at once (its default action, as in
    a pytest session), it first stops the launches. Set on the first launch
    from the main thread; a handler of the program's own is left alone."""
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _end_on_sigterm)


def running_launchers():
    """Every launcher of this process whose processes run."""
    return [launcher for launcher in list(_LIVE) if launcher.running]


class Launcher:
    """The processes of one cluster or one pod's hosts; see the module.

    network: "private", "host" or "auto" (checked by the owner, resolved on
    first use); start_timeout: seconds (before scaling) the processes may take
    to say Ready; env: extra environment for every process; hooks: the
    owner's `LaunchHooks`; who, opt_out: the words of the warning when "auto"
    falls back to the host network (see `netns.choose`).
    """

    def __init__(self, *, network, start_timeout, env, hooks, who, opt_out):
        self._network = network
        self._start_timeout = start_timeout
        self._env = env
        self._hooks = hooks
        self._who = who
        self._opt_out = opt_out
        self.net = None  # The launch's network (see `netns`), while launched.
        self.workdir: workdir_lib.WorkDir | None = None
        # The tasks of the cluster spec, then processes launched beside them
        # (a relay): started, watched and stopped with them.
        self.tasks: list[task_lib.Task] = []
        self.helpers: list[task_lib.Task] = []
        self.zygote: zygote_lib.Zygote | None = None
        self._zygote_considered = False

    @property
    def network(self) -> str:
        """ "private" or "host"; resolving "auto" probes once per process."""
        self._network = netns.choose(self._network, who=self._who, opt_out=self._opt_out)
        return self._network

    @property
    def launched(self) -> bool:
        """Whether a launch is open (its network and directory exist)."""
        return self.workdir is not None

    @property
    def running(self) -> bool:
        return bool(self.tasks)

    @property
    def pids(self) -> list[int]:
        return [t.pid for t in self.tasks]

    @property
    def zygote_pid(self) -> int | None:
        """The running zygote's process id; None where the tasks are fresh processes."""
        return None if self.zygote is None else self.zygote.pid

    @property
    def directory(self) -> str | None:
        return None if self.workdir is None else self.workdir.path

    @contextlib.contextmanager
    def launching(self):
        """Begins a fresh launch (see the module): what ran is stopped first;
        any error in the block stops what was launched."""
        context.check_can_launch()
        network = self.network
        _stop_on_sigterm()
        self.stop(graceful=False)
        workdir_lib.reap_abandoned()
        _LIVE.add(self)
        try:
            self.net = netns.open_network(network)
            self.workdir = workdir_lib.WorkDir()
            self._zygote_considered = False
            yield self
        except BaseException:
            self.stop(graceful=False)
            raise

    def pick_ports(self, count):
        """Free ports for `count` servers (the hooks' picker, if any). Picked on
        the host even for a private network, where any port is free: still
        distinct within the launch, and the same code path."""
        return (self._hooks.pick_ports or ports.pick_ports)(count)

    @contextlib.contextmanager
    def reach_servers(self, count):
        """([port, ...], helper specs) for `count` servers this process reaches
        as a client, in the launch's network (see `netns`)."""
        with self.net.reach_servers(count, self._hooks.pick_ports, self.process_env) as reach:
            yield reach

    def forward_to_client(self, port, servers):
        """Lets `servers` servers reach this process's 127.0.0.1:`port`."""
        self.net.forward_to_client(port, self.helpers, servers)

    def process_env(self, name):
        """The environment of the process `name`: this one's, its own TMPDIR, the env given."""
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # What a process writes to the temp dir goes with the launch.
        env["TMPDIR"] = self.workdir.task_temp_dir(name)
        env.update(self._env)
        # Tasks import functions' modules the way this process does.
        path = [os.path.abspath(p or os.curdir) for p in sys.path]
        if self._env.get("PYTHONPATH"):
            path.insert(0, self._env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(path)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def spawn(self, task_specs, helper_specs=(), planned=None):
        """Starts a process per spec (a zygote first where the launch would fork
        two or more: `planned`, every spec it will start, by default these); on
        any failure kills those started and re-raises. Returns the tasks."""
        task_specs, helper_specs = list(task_specs), list(helper_specs)
        if not self._zygote_considered:  # Once per launch: a later spawn starts fresh processes.
            self._zygote_considered = True
            self._start_zygote(task_specs + helper_specs if planned is None else list(planned))
        launched = []
        try:
            for spec in task_specs + helper_specs:
                launched.append(self._start(spec))
        except BaseException:
            for task in launched:
                task.kill()
            for task in launched:
                task.reap()
            raise
        self.tasks += launched[: len(task_specs)]
        self.helpers += launched[len(task_specs) :]
        return launched[: len(task_specs)]

    def respawn(self, task):
        """A new process for `task`'s spec (same TF_CONFIG, port, log and
        TMPDIR) in its place, once `task`'s process group is killed and reaped."""
        self.discard(task)
        new = self._start(task.spec)
        self.tasks.append(new)
        return new

    def discard(self, task):
        """Kills and reaps `task`'s process group; it is no longer launched."""
        task.kill()
        task.reap()
        self.tasks.remove(task)

    def _start(self, spec):
        zygote = self.zygote
        if zygote is not None and zygote.can_fork(spec):
            start = zygote.fork
        else:
            start = functools.partial(task_lib.start_fresh, network=self.net, command=self._hooks.command)
        task = task_lib.Task(spec, log_path=self.workdir.log_path(spec.name), start=start)
        self.workdir.record_task(task.pid)
        if self._hooks.on_launch is not None:
            self._hooks.on_launch(spec.name, task.pid)
        return task

    def _start_zygote(self, specs):
        """Starts the launch's zygote (`self.zygote`) and waits for it, where it
        would fork two tasks or more."""
        if self._hooks.command is not None or not zygote_lib.wanted():
            return
        env = self.process_env(zygote_lib.NAME)
        env.pop("TF_CONFIG", None)
        mains = [spec.main for spec in specs if zygote_lib.forkable(spec, env)]
        if len(mains) < 2:
            return
        self.zygote = zygote_lib.start(
            mains,
            env=env,
            workdir=self.workdir,
            network=self.net,
            on_launch=self._hooks.on_launch,
            start_timeout=self._start_timeout,
        )

    def wait_ready(self, tasks=None):
        """Waits until `tasks` (default: every process launched) said Ready."""
        waited = self.tasks + self.helpers if tasks is None else list(tasks)
        # A zygote's death is the cause of its tasks' deaths: named first.
        wait_ready(waited, self._start_timeout, lambda: self.check_zygote("during start-up"))
        # Tasks may say Ready before their zygote dies, and die with it after.
        self.check_zygote("during start-up")

    def check_zygote(self, when):
        """Raises the error naming the zygote if it has died."""
        if self.zygote is not None:
            self.zygote.check(when)

    def zygote_failure(self, when):
        """The error naming the zygote if it has died (`when`), else None."""
        return None if self.zygote is None else self.zygote.failure(when)

    def exit_reason(self, task, code):
        """How `task` ended, and the zygote's death when that was the cause."""
        cause = "" if self.zygote is None else self.zygote.death_of(task.process)
        return report.exit_reason(code) + cause

    def stop(self, graceful):
        """Stops every process (asked to exit first when `graceful`), closes the
        network and removes the directory."""
        launched, self.tasks, self.helpers = self.tasks + self.helpers, [], []
        stop_all(launched, graceful=graceful)
        if self.zygote is not None:
            self.zygote.stop(EXIT_GRACE_S)
            self.zygote = None
        if self.net is not None:
            # Goes with its last process: all of them are reaped by now.
            self.net.close()
            self.net = None
        if self.workdir is not None:
            self.workdir.remove()
            self.workdir = None
        _LIVE.discard(self)


def wait_ready(tasks, timeout, before_death=None):
    """Waits until every task said Ready; raises the error naming the task that
    died (after calling `before_death`, which may raise a better one), failed
    or did not start within `timeout` seconds (scaled; with stacks)."""
    limit = deadlines.scaled(timeout)
    deadline = time.monotonic() + limit
    while not all(t.ready for t in tasks):
        waiting = [t for t in tasks if not t.ready]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            stacks = dump_stacks(tasks)
            stopped = {t.name for t in tasks if t.stopped()}
            raise report.start_timeout(
                deadlines.describe(timeout), tasks, waiting, stacks, stopped
            )
        for conn in mp_connection.wait([t.conn for t in waiting], remaining):
            task = next(t for t in waiting if t.conn is conn)
            try:
                message = conn.recv()
            except (EOFError, OSError):
                code = task.wait(EXIT_GRACE_S)
                if before_death is not None:
                    before_death()
                raise report.start_died(task, code) from None
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
    deadline = time.monotonic() + deadlines.scaled(STACK_DUMP_WAIT_S)
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
    return "\n\n".join(t for t in threads if not any(f in t for f in task_lib.WATCHDOG_FRAMES))


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
