"""`Launcher`: the one place that starts, watches and stops a group of task processes (internal).

A `LocalCluster` (workers that run functions) and a `LocalServers` (a fake
pod's hosts, and their relay) each own one `Launcher`; neither is the other.
A launch, as the owner writes it:

    with launcher.launching():              # stops what ran, makes the network and directory
        ports = launcher.pick_ports(n)
        launcher.spawn(task_specs, helper_specs)   # one `task.Task` per spec
        launcher.wait_ready()               # each said Ready, or the error naming the task

An error inside the block stops everything launched so far. Each process runs
`bootstrap` (`python -m`), then the main its `TaskSpec` names, and speaks
`protocol` on its socket. Where two or more of a launch's tasks may be forked
(`task.forkable`; not when `LaunchHooks.command` replaces command lines, nor
with COMPAT_DISTRIBUTE_ZYGOTE=0), a zygote (see `zygote`) imports TensorFlow
once and forks them; the others start as fresh processes. A zygote that fails
fails the launch, naming it. Stopping asks each process to exit, then SIGTERM,
then SIGKILL to its process group; every process is reaped, the private network
closed and the directory removed. Launchers still running at exit are stopped.
Start-up and stack-dump waits scale with `deadlines`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
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

__all__ = [
    "EXIT_GRACE_S",
    "Launcher",
    "STACK_DUMP_WAIT_S",
    "TERM_GRACE_S",
    "ZYGOTE_ENV_VAR",
    "dump_stacks",
    "running_launchers",
    "spawn_all",
    "start_zygote",
    "stop_all",
    "wait_ready",
    "zygote_wanted",
]

# How long a stack dump (SIGUSR1) may take to appear in the tasks' logs (scaled).
STACK_DUMP_WAIT_S = 2.0
# How long a task asked to exit (or dying) may take before it gets SIGTERM.
EXIT_GRACE_S = 2.0
# How long a task may take to end after SIGTERM before it is killed (SIGKILL).
TERM_GRACE_S = 2.0
# How often stopping looks whether the tasks it signalled have ended.
_EXIT_POLL_S = 0.01
# "0" starts every task as a fresh process; "1" (the default) forks them from a zygote.
ZYGOTE_ENV_VAR = "COMPAT_DISTRIBUTE_ZYGOTE"

_LIVE = weakref.WeakSet()


@atexit.register
def _stop_live_launchers():
    for launcher in list(_LIVE):
        launcher.stop(graceful=True)


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
        self.private_network: netns.PrivateNetwork | None = None
        self.workdir: workdir_lib.WorkDir | None = None
        # The tasks of the cluster spec, then processes launched beside them
        # (a relay): started, watched and stopped with them.
        self.tasks: list[task_lib.Task] = []
        self.helpers: list[task_lib.Task] = []
        self.zygote: task_lib.Zygote | None = None

    @property
    def network(self) -> str:
        """ "private" or "host"; resolving "auto" probes once per process."""
        self._network = netns.choose(self._network, who=self._who, opt_out=self._opt_out)
        return self._network

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
        self.stop(graceful=False)
        workdir_lib.reap_abandoned()
        _LIVE.add(self)
        try:
            if network == "private":
                self.private_network = netns.make()
            self.workdir = workdir_lib.WorkDir()
            yield self
        except BaseException:
            self.stop(graceful=False)
            raise

    def pick_ports(self, count):
        """Free ports for `count` servers (the hooks' picker, if any). Picked on
        the host even for a private network, where any port is free: still
        distinct within the launch, and the same code path."""
        return (self._hooks.pick_ports or ports.pick_ports)(count)

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

    def spawn(self, task_specs, helper_specs=()):
        """Starts a process per spec; on any failure kills those started and re-raises."""
        specs = list(task_specs) + list(helper_specs)
        self._start_zygote(specs)
        launched = spawn_all(
            specs,
            workdir=self.workdir,
            network=self.private_network,
            hooks=self._hooks,
            zygote=self.zygote,
        )
        self.tasks, self.helpers = launched[: len(task_specs)], launched[len(task_specs) :]

    def _start_zygote(self, specs):
        """Starts the launch's zygote (`self.zygote`) and waits for it, where it
        would fork two tasks or more."""
        if self._hooks.command is not None or not zygote_wanted():
            return
        env = self.process_env(task_lib.Zygote.NAME)
        env.pop("TF_CONFIG", None)
        mains = [spec.main for spec in specs if task_lib.forkable(spec, env)]
        if len(mains) < 2:
            return
        self.zygote = start_zygote(
            mains,
            env=env,
            workdir=self.workdir,
            network=self.private_network,
            hooks=self._hooks,
            start_timeout=self._start_timeout,
        )

    def wait_ready(self):
        wait_ready(self.tasks + self.helpers, self._start_timeout)
        if self.zygote is not None:
            # Tasks may say Ready before their zygote dies, and die with it after.
            self.zygote.check("during start-up")

    def stop(self, graceful):
        """Stops every process (asked to exit first when `graceful`), closes the
        network and removes the directory."""
        launched, self.tasks, self.helpers = self.tasks + self.helpers, [], []
        stop_all(launched, graceful=graceful)
        if self.zygote is not None:
            self.zygote.stop(EXIT_GRACE_S)
            self.zygote = None
        if self.private_network is not None:
            # Goes with its last process: all of them are reaped by now.
            self.private_network.close()
            self.private_network = None
        if self.workdir is not None:
            self.workdir.remove()
            self.workdir = None
        _LIVE.discard(self)


def zygote_wanted(environ=None) -> bool:
    """Whether launches may fork their tasks from a zygote ($COMPAT_DISTRIBUTE_ZYGOTE)."""
    return _env.read(ZYGOTE_ENV_VAR, environ) and hasattr(os, "pidfd_open")


def start_zygote(mains, *, env, workdir, network, hooks, start_timeout):
    """A ready `task.Zygote` (see `zygote`) for the launch in `workdir`: its
    pid recorded there and given to `hooks.on_launch` as "zygote"."""
    zygote = task_lib.Zygote(
        mains, env=env, log_path=workdir.log_path(task_lib.Zygote.NAME), network=network
    )
    try:
        workdir.record_task(zygote.pid)
        if hooks.on_launch is not None:
            hooks.on_launch(task_lib.Zygote.NAME, zygote.pid)
        zygote.wait_ready(deadlines.scaled(start_timeout), deadlines.describe(start_timeout))
    except BaseException:
        zygote.stop(0)
        raise
    return zygote


def spawn_all(specs, *, workdir, network, hooks, zygote=None):
    """A started `task.Task` per spec, forked by `zygote` where `task.forkable`
    says so; on any failure kills those started and re-raises."""
    tasks = []
    try:
        for spec in specs:
            forks = zygote is not None and task_lib.forkable(spec, zygote.env)
            task = task_lib.Task(
                spec,
                log_path=workdir.log_path(spec.name),
                network=network,
                command=hooks.command,
                zygote=zygote if forks else None,
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


def wait_ready(tasks, timeout):
    """Waits until every task said Ready; raises the error naming the task that
    died, failed or did not start within `timeout` seconds (scaled; with stacks)."""
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
                if task.zygote is not None:
                    task.zygote.check("during start-up")  # Its death is the cause.
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
