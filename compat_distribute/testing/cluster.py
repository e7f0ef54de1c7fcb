"""Real multi-worker TensorFlow clusters made of local processes.

`local_cluster` starts one fresh Python process per task (an optional chief,
then N workers), each with its own `TF_CONFIG` naming 127.0.0.1 addresses, and
runs an importable function in every task:

    def step():  # at module level, so a worker can import it by name
        strategy = cluster.worker_strategy()
        return strategy.num_replicas_in_sync

    with cluster.local_cluster(num_workers=2) as c:
        assert c.run(step) == [2, 2]

Tasks start once per cluster and are reused by every `run` (importing
TensorFlow is the dominant cost). A worker imports TensorFlow and builds
nothing: the function it runs builds its strategy, because
MultiWorkerMirroredStrategy must be created before any op in a process;
`worker_strategy()` builds it once per worker and caches it.

Faults surface and nothing is left behind: an exception in a task is re-raised
here as `ClusterTaskError` naming the task; a task that dies or hangs past
`timeout` fails the call with every task's Python stack; every exit path kills
the tasks' process groups and reaps them. After a fault the cluster is torn
down: `run` raises `ClusterError` until `start()` launches fresh tasks.

Network. The cluster spec names 127.0.0.1 only, but TensorFlow's gRPC server
has no bind-address option: `GrpcServer::Init` in
tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc calls
`builder.AddListeningPort("0.0.0.0:" + std::to_string(requested_port), ...)`,
so every task would listen on every interface of the machine. With
`network="private"` all tasks of a cluster run in one network namespace of
their own (Linux), whose only interface is its own loopback: their servers
are reachable from the tasks of that cluster and from nothing else, this
process included (it drives the tasks over socketpairs, which cross
namespaces). Tasks then have no network beyond that loopback. The namespace is
made by `unshare --net` (root) or `unshare --user --map-root-user --net`
(unprivileged, where user namespaces are enabled; the tasks then see their uid
as 0 in that user namespace, with no more rights on the host than the caller),
held by file descriptors of this process, and entered by each task with
`nsenter`; it disappears with the last task once the cluster stops. `network="auto"` (the default) is private
where that works and otherwise host, with a warning saying why;
`network="host"` runs the tasks in this process's namespace (needed when this
process itself must reach their servers).

This is the one module of the package that launches processes.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import numbers
import os
import pickle
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from multiprocessing import connection as mp_connection

from compat_distribute import _validate
from compat_distribute._tf_config import TFConfig, parse_tf_config  # re-exported

__all__ = [
    "ClusterError",
    "ClusterTaskError",
    "ClusterTimeoutError",
    "LocalCluster",
    "TFConfig",
    "current_task",
    "local_cluster",
    "parse_tf_config",
    "pick_unused_port",
    "worker_strategy",
]

# A task's first lines: arm the stack dump and say "alive" before importing
# the package (which imports TensorFlow, seconds of work), so that a task stuck
# in start-up can still show its stack.
_BOOTSTRAP = """\
import faulthandler, os, signal, sys
from multiprocessing import connection
faulthandler.enable()
faulthandler.register(signal.SIGUSR1, all_threads=True)
conn = connection.Connection(int(sys.argv[sys.argv.index("--fd") + 1]))
conn.send(("alive", {"pid": os.getpid()}))
from compat_distribute.testing import _worker
sys.exit(_worker.main(sys.argv[1:], conn))
"""
# Lines of a task's output quoted in errors.
_TAIL_LINES = 40
# After one task fails, how long the others get to finish before they are
# presumed blocked on the failed peer (collectives wait for every task).
_FAILURE_GRACE_S = 1.0
# How long an `exit` request may take before the process group is killed.
_EXIT_GRACE_S = 2.0
# Texts TF logs when its gRPC server cannot bind the port in TF_CONFIG.
_PORT_CLASH_MARKERS = ("Could not start gRPC server", "Failed to add port to server")
# A port taken between picking and binding is retried this many times.
_PORT_CLASH_RETRIES = 3


# --------------------------------------------------------------------------
# Errors


class ClusterError(RuntimeError):
    """A local cluster could not start, or was used after it was torn down."""


class ClusterTaskError(ClusterError):
    """A task raised, died, or failed to start.

    Attributes:
        task_type, task_id: the task, e.g. "worker", 1.
        exitcode: the process's exit status when it died (negative: killed by
            that signal), None when the function raised.
        remote_traceback: the task's formatted traceback ("" when it died).
        output_tail: the last lines the task wrote to stdout/stderr.
        stacks: {"worker 0": Python stacks dumped when the call failed} for the
            tasks that were still alive then.
    """

    def __init__(
        self,
        message,
        *,
        task_type,
        task_id,
        exitcode=None,
        remote_traceback="",
        output_tail="",
        stacks=None,
    ):
        super().__init__(message)
        self.task_type = task_type
        self.task_id = task_id
        self.exitcode = exitcode
        self.remote_traceback = remote_traceback
        self.output_tail = output_tail
        self.stacks = dict(stacks or {})


class ClusterTimeoutError(ClusterError, TimeoutError):
    """A call or start-up did not finish within the cluster's timeout.

    Attributes:
        pending: names of the tasks that had not answered, e.g. ["worker 1"].
        stacks: {"worker 0": Python stacks dumped at the timeout}.
    """

    def __init__(self, message, *, pending, stacks):
        super().__init__(message)
        self.pending = list(pending)
        self.stacks = dict(stacks)


# --------------------------------------------------------------------------
# Ports


class PortPicker:
    """Hands out free 127.0.0.1 ports, never the same port twice per process.

    The OS picks a free port (bind to port 0); the registry keeps a port handed
    to one cluster from going to another one before its server binds it. A port
    can still be taken by another program between picking and binding: the
    cluster detects TF's bind failure and retries with new ports.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._handed_out = set()

    def pick(self) -> int:
        with self._lock:
            for _ in range(100):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                if port not in self._handed_out:
                    self._handed_out.add(port)
                    return port
        raise ClusterError(
            "could not find a free 127.0.0.1 port that was not " "already handed out in 100 tries."
        )


_PORTS = PortPicker()


def pick_unused_port() -> int:
    """A free port on 127.0.0.1 that this process has not handed out before."""
    return _PORTS.pick()


# --------------------------------------------------------------------------
# Private network

_NETWORKS = ("private", "host", "auto")
# How long making a namespace (or the probe for one) may take.
_NAMESPACE_TIMEOUT_S = 10.0
# Runs as the first process of a new network namespace: brings its loopback up
# (SIOCSIFFLAGS, so `ip` need not be installed), checks that 127.0.0.1 answers,
# says "up", and lives until its stdin closes so its namespace can be opened.
_LOOPBACK_UP = """\
import fcntl, socket, struct, sys
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"  # struct ifreq: interface name, then ifr_flags.
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    got = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0))
    flags = struct.unpack(IFREQ, got)[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))
with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    socket.create_connection(server.getsockname(), timeout=5).close()
sys.stdout.write("up\\n")
sys.stdout.flush()
sys.stdin.read()
"""


class _PrivateNetwork:
    """A network namespace with only its loopback up, held by open descriptors.

    No process stays behind to hold it: the process that made it exits once
    this one has opened its /proc/PID/ns files; the namespace lives while those
    descriptors are open or a task is inside, and goes with the last of them.
    """

    def __init__(self, unshare, nsenter, user):
        self._nsenter = nsenter
        self._user = user
        kinds = ("user", "net") if user else ("net",)
        command = [unshare, *(["--user", "--map-root-user"] if user else []), "--net"]
        self.how = " ".join([os.path.basename(unshare)] + command[1:])
        self._fds = {}
        maker = subprocess.Popen(
            command + ["--", sys.executable, "-I", "-S", "-c", _LOOPBACK_UP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        said = b""
        try:
            if select.select([maker.stdout], [], [], _NAMESPACE_TIMEOUT_S)[0]:
                said = maker.stdout.readline()
            if said == b"up\n":
                for kind in kinds:
                    self._fds[kind] = os.open(f"/proc/{maker.pid}/ns/{kind}", os.O_RDONLY)
        except BaseException:
            self.close()
            raise
        finally:
            maker.stdin.close()  # Lets it exit.
            if not self._fds:
                os.kill(maker.pid, signal.SIGKILL)  # Not reaped yet: still ours.
            try:
                code = maker.wait(timeout=_EXIT_GRACE_S)
            except subprocess.TimeoutExpired:
                os.kill(maker.pid, signal.SIGKILL)
                code = maker.wait()
            errors = maker.stderr.read().decode("utf-8", "replace").strip().splitlines()
            maker.stdout.close()
            maker.stderr.close()
        if not self._fds:
            why = (
                _exit_reason(code)
                if said or code != -signal.SIGKILL
                else f"did not bring up its loopback within {_NAMESPACE_TIMEOUT_S:g} s"
            )
            raise ClusterError(f"`{self.how}` {why}: {errors[-1] if errors else '(no output)'}")

    @property
    def fds(self):
        """Descriptors a task must inherit to enter the namespace."""
        return tuple(self._fds.values())

    def enter(self, command):
        """`command` prefixed to run inside the namespace (nsenter execs it:
        the pid stays the command's own)."""
        prefix = [self._nsenter]
        if self._user:
            prefix += [f"--user=/proc/self/fd/{self._fds['user']}", "--preserve-credentials"]
        return prefix + [f"--net=/proc/self/fd/{self._fds['net']}", "--"] + list(command)

    def close(self):
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


def _probe_private_network():
    """(unshare, nsenter, user) that make and enter a private network here, or
    a str saying why none can be made."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are a Linux feature and this is {sys.platform}"
    tools = {name: shutil.which(name) for name in ("unshare", "nsenter")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        return f"{' and '.join(missing)} (util-linux) not found on PATH"
    failures = []
    for user in (False, True):  # As root, or in a user namespace of our own.
        try:
            network = _PrivateNetwork(tools["unshare"], tools["nsenter"], user)
        except (ClusterError, OSError) as e:
            failures.append(str(e))
            continue
        try:
            entered = subprocess.run(
                network.enter([sys.executable, "-I", "-S", "-c", ""]),
                pass_fds=network.fds,
                capture_output=True,
                timeout=_NAMESPACE_TIMEOUT_S,
            )
        except (subprocess.TimeoutExpired, OSError) as e:
            failures.append(f"nsenter into `{network.how}` failed: {e}")
            continue
        finally:
            network.close()
        if entered.returncode == 0:
            return tools["unshare"], tools["nsenter"], user
        failures.append(
            f"nsenter into `{network.how}` {_exit_reason(entered.returncode)}: "
            f"{entered.stderr.decode('utf-8', 'replace').strip() or '(no output)'}"
        )
    return "; ".join(failures)


_PRIVATE_NETWORK_SUPPORT = None  # The probe's answer, once per process.
_PRIVATE_NETWORK_LOCK = threading.Lock()


def _private_network_support():
    global _PRIVATE_NETWORK_SUPPORT
    with _PRIVATE_NETWORK_LOCK:
        if _PRIVATE_NETWORK_SUPPORT is None:
            _PRIVATE_NETWORK_SUPPORT = _probe_private_network()
        return _PRIVATE_NETWORK_SUPPORT


# --------------------------------------------------------------------------
# Functions by name


def _resolve(obj, qualname):
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _function_reference(fn):
    """(module, qualname) that a fresh process can import `fn` by, or raises."""
    if not callable(fn):
        raise TypeError(f"fn must be a module-level function; got {_validate.show(fn)}.")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    fix = (
        " Define fn with `def` at the top level of an importable module "
        "(a test module is fine) and pass any values it needs as args."
    )
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise TypeError(
            f"fn must be a module-level function, found in a worker by "
            f"module:qualname; {_validate.show(fn)} has no __module__/__qualname__.{fix}"
        )
    if "<lambda>" in qualname:
        raise ValueError(
            f"fn is a lambda ({module}:{qualname}); a worker process cannot "
            f"import a lambda by name.{fix}"
        )
    if "<locals>" in qualname:
        raise ValueError(
            f"fn {module}:{qualname} is defined inside another function (a "
            f"closure or nested function); a worker process cannot import it by "
            f"name.{fix}"
        )
    if module == "__main__":
        main = sys.modules["__main__"]
        spec = getattr(main, "__spec__", None)
        path = getattr(main, "__file__", None)
        if spec is not None and spec.name not in ("__main__", None):
            module = spec.name  # started with `python -m package.module`
        elif path and os.path.dirname(os.path.abspath(path)) in (
            os.path.abspath(p or os.curdir) for p in sys.path
        ):
            # A script whose directory is on sys.path: workers import it by its
            # file name (top-level code must sit under `if __name__ == "__main__"`).
            module = os.path.splitext(os.path.basename(path))[0]
        else:
            raise ValueError(
                f"fn {qualname} is defined in __main__ (an interactive session, "
                f"`python -c`, or a script that is not on sys.path), which a worker "
                f"process cannot import.{fix}"
            )
        found = _resolve_or_none(main, qualname)
    else:
        mod = sys.modules.get(module)
        found = _resolve_or_none(mod, qualname) if mod is not None else None
    if found is not fn:
        raise ValueError(
            f"fn {_validate.show(fn)} is not reachable as {module}:{qualname} (was the "
            f"name rebound, or is it a method or a functools.partial?).{fix}"
        )
    return module, qualname


def _loads_or_none(data):
    try:
        return None if data is None else pickle.loads(data)
    except Exception:  # pylint: disable=broad-except
        return None


def _resolve_or_none(obj, qualname):
    try:
        return _resolve(obj, qualname)
    except AttributeError:
        return None


# --------------------------------------------------------------------------
# Inside a worker


# Set by _worker at start-up: this process's TFConfig.
_WORKER_TF_CONFIG: TFConfig | None = None
_WORKER_STRATEGIES: dict = {}
# Collective group keys reserved for each strategy a worker builds.
_COLLECTIVE_KEY_RANGE = 100_000


def current_task() -> tuple[str, int]:
    """(task_type, task_id) of this worker process, e.g. ("worker", 1)."""
    if _WORKER_TF_CONFIG is None:
        raise RuntimeError(
            "current_task() is for functions run by LocalCluster.run inside a "
            "worker process; this process is not a local_cluster task."
        )
    return _WORKER_TF_CONFIG.task_type, _WORKER_TF_CONFIG.task_id


def worker_strategy(factory=None):
    """This worker's multi-worker strategy, built on first use and cached.

    Call it inside functions given to `LocalCluster.run`: the strategy must be
    built before any other op in the worker, and builds its gRPC server once.

    Args:
        factory: zero-argument callable that builds the strategy; default
            `tf.distribute.MultiWorkerMirroredStrategy`. Each factory is called
            once per worker process; later calls return the same object, so
            every `run` on a cluster shares one strategy. Every task must ask
            for the same factories in the same order (collectives pair up by
            key, and keys are handed out in build order).
    """
    current_task()  # Raises outside a worker.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow.python.distribute import collective_all_reduce_strategy as cas

    if factory is None:
        factory = tf.distribute.MultiWorkerMirroredStrategy
    if factory not in _WORKER_STRATEGIES:
        # Every strategy numbers its collectives from the class-level
        # `_collective_key_base`, so a second strategy in a process would reuse
        # the first one's keys ("Collective instance 101 expected type 0 ...
        # but got type 1"). Give each strategy of this process its own range.
        base = _COLLECTIVE_KEY_RANGE * len(_WORKER_STRATEGIES)
        cas.CollectiveAllReduceStrategy._collective_key_base = (
            base  # pylint: disable=protected-access
        )
        cas.CollectiveAllReduceStrategyV1._collective_key_base = (
            base  # pylint: disable=protected-access
        )
        _WORKER_STRATEGIES[factory] = factory()
    return _WORKER_STRATEGIES[factory]


# --------------------------------------------------------------------------
# The cluster


def _task_name(task):
    return f"{task[0]} {task[1]}"


def _tail(text, lines=_TAIL_LINES):
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def _indent(text):
    return "\n".join("    " + line for line in text.splitlines()) or "    (nothing)"


def _exit_reason(code):
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _drop_watchdog(dump):
    # The worker's orphan watchdog thread (see _worker) is in every dump; it
    # says nothing about the failure.
    threads = dump.strip().split("\n\n")
    return "\n\n".join(t for t in threads if "_exit_when_orphaned" not in t)


class _PortClash(Exception):
    """A task's gRPC server could not bind its port: restart with new ports."""


@dataclasses.dataclass
class _Task:
    task_type: str
    task_id: int
    process: subprocess.Popen
    conn: mp_connection.Connection
    log_path: str
    alive: bool = False  # said hello: its SIGUSR1 stack dump is registered
    ready: bool = False  # imported TF and configured devices

    @property
    def name(self):
        return _task_name((self.task_type, self.task_id))

    def output(self, start=0):
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")

    def output_size(self):
        return os.path.getsize(self.log_path)


_LIVE_CLUSTERS = weakref.WeakSet()


@atexit.register
def _stop_live_clusters():
    for c in list(_LIVE_CLUSTERS):
        c.stop()


class LocalCluster:
    """Tasks of a multi-worker cluster as local processes; see `local_cluster`.

    Use as a context manager, or call `start()` and `stop()`. After a fault the
    tasks are torn down and `run` raises `ClusterError`; `start()` launches
    fresh tasks (with new ports).
    """

    def __init__(
        self,
        num_workers=2,
        *,
        has_chief=False,
        devices_per_worker=1,
        timeout=120,
        env=None,
        start_timeout=None,
        network="auto",
    ):
        self._num_workers = _validate.positive_int("num_workers", num_workers)
        if not isinstance(has_chief, bool):
            raise TypeError(f"has_chief must be True or False; got {_validate.show(has_chief)}.")
        self._has_chief = has_chief
        self._devices_per_worker = _validate.positive_int("devices_per_worker", devices_per_worker)
        self._timeout = _positive_seconds("timeout", timeout)
        self._start_timeout = (
            max(self._timeout, 60.0)
            if start_timeout is None
            else _positive_seconds("start_timeout", start_timeout)
        )
        self._env = _check_env(env)
        self._network = _check_network(network)
        self._private_network: _PrivateNetwork | None = None
        self._tasks: list[_Task] = []
        self._cluster_spec: dict[str, tuple[str, ...]] = {}
        self._log_dir = None
        self._failure = None  # Why the last tasks were torn down, if a fault.
        self._call_count = 0

    # -- Public surface ------------------------------------------------------

    @property
    def task_names(self) -> list[str]:
        """Tasks in result order: "chief 0" first, then "worker 0", "worker 1"..."""
        return [_task_name(t) for t in self._task_keys()]

    @property
    def cluster_spec(self) -> dict[str, tuple[str, ...]]:
        """{job: ("127.0.0.1:port", ...)} of the running tasks."""
        return dict(self._cluster_spec)

    @property
    def pids(self) -> list[int]:
        """Process ids of the running tasks, in task order."""
        return [t.process.pid for t in self._tasks]

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    @property
    def network(self) -> str:
        """ "private" or "host": where the tasks' gRPC servers listen.

        "private": in a network namespace of the cluster's own, reachable only
        by its tasks; "host": on every interface of this machine (TensorFlow
        binds 0.0.0.0). Resolving network="auto" probes the platform once per
        process, and warns when it falls back to "host".
        """
        if self._network == "auto":
            support = _private_network_support()
            if isinstance(support, str):
                warnings.warn(
                    f"local_cluster(network='auto') runs its tasks on the host network: "
                    f"no private network namespace here ({support}). Their gRPC servers "
                    f"listen on all interfaces, since TensorFlow binds 0.0.0.0. Pass "
                    f"network='host' to accept that without this warning.",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self._network = "host"
            else:
                self._network = "private"
        return self._network

    def output(self, task_type, task_id) -> str:
        """Everything the task has written to stdout/stderr while it runs."""
        for t in self._tasks:
            if (t.task_type, t.task_id) == (task_type, task_id):
                return t.output()
        raise ValueError(
            f"no running task {task_type} {task_id}; tasks: "
            f"{', '.join(self.task_names) if self._tasks else 'none (not running)'}."
        )

    def start(self):
        """Launches every task and waits until each has imported TensorFlow."""
        if self._tasks:
            return self
        self._launch()
        return self

    def stop(self):
        """Asks every task to exit, kills their process groups, reaps them."""
        self._teardown(graceful=True)
        self._failure = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()

    def run(self, fn, /, *args, **kwargs):
        """Runs `fn(*args, **kwargs)` in every task; returns results in task order.

        `fn` must be importable by module:qualname from a fresh process (a
        module-level function); args, kwargs and each result must pickle.

        Raises:
            ClusterTaskError: a task raised (its traceback and output are in the
                message) or died; the cluster is torn down.
            ClusterTimeoutError: some task did not answer within `timeout`
                seconds; every task's stack is in the message; torn down.
            ClusterError: the cluster was torn down by an earlier fault.
        """
        module, qualname = _function_reference(fn)
        try:
            payload = pickle.dumps((args, kwargs))
        except Exception as e:  # pickle raises several types.
            raise TypeError(
                f"args and kwargs for {module}:{qualname} must pickle, to reach the "
                f"worker processes; pickling failed: {type(e).__name__}: {e}"
            ) from e
        if not self._tasks:
            if self._failure is not None:
                raise ClusterError(
                    f"this local_cluster was torn down after a fault ({self._failure}); "
                    f"call start() to launch fresh tasks, or create a new cluster."
                )
            raise ClusterError(
                "this local_cluster is not running: use `with local_cluster(...) as "
                "cluster:` or call cluster.start() before run()."
            )
        for attempt in range(_PORT_CLASH_RETRIES + 1):
            try:
                return self._call(module, qualname, payload)
            except _PortClash as clash:
                if attempt == _PORT_CLASH_RETRIES:
                    error = clash.args[0]
                    error.args = (
                        f"{error.args[0]}\nTensorFlow could not bind a port in "
                        f"{attempt + 1} launches with fresh ports.",
                    )
                    self._failure = str(error).splitlines()[0]
                    raise error from None
                self._launch()
        raise AssertionError("unreachable")

    # -- Hooks (tests override these to inject faults) ----------------------

    def _pick_ports(self, count):
        return [pick_unused_port() for _ in range(count)]

    def _task_command(self, task_type, task_id, fd):
        del task_type, task_id
        return [
            sys.executable,
            "-c",
            _BOOTSTRAP,
            "--fd",
            str(fd),
            "--devices",
            str(self._devices_per_worker),
            "--parent-pid",
            str(os.getpid()),
        ]

    # -- Start-up ------------------------------------------------------------

    def _task_keys(self):
        keys = [("chief", 0)] if self._has_chief else []
        return keys + [("worker", i) for i in range(self._num_workers)]

    def _launch(self):
        network = self.network
        if network == "private":
            support = _private_network_support()
            if isinstance(support, str):
                raise ClusterError(
                    f"local_cluster(network='private') cannot make a private network "
                    f"namespace here: {support}. As root this needs `unshare --net`; "
                    f"unprivileged, user namespaces (sysctls user.max_user_namespaces > 0, "
                    f"kernel.unprivileged_userns_clone=1 where it exists, "
                    f"kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04+). "
                    f"Or pass network='host' (servers on all interfaces)."
                )
        self._teardown(graceful=False)
        keys = self._task_keys()
        # Picked on the host even for a private network, where any port is
        # free: still distinct within the cluster, and the same code path.
        ports = self._pick_ports(len(keys))
        spec = {}
        for (task_type, _), port in zip(keys, ports):
            spec.setdefault(task_type, []).append(f"127.0.0.1:{port}")
        self._cluster_spec = {job: tuple(a) for job, a in spec.items()}
        self._log_dir = tempfile.mkdtemp(prefix="local_cluster-")
        self._failure = None
        _LIVE_CLUSTERS.add(self)
        try:
            if network == "private":
                self._private_network = _PrivateNetwork(*_private_network_support())
            for task_type, task_id in keys:
                self._tasks.append(self._spawn(task_type, task_id))
            self._wait_ready()
        except BaseException:
            self._teardown(graceful=False)
            raise

    def _spawn(self, task_type, task_id):
        tf_config = TFConfig(self._cluster_spec, task_type, task_id, rpc_layer="grpc")
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env.update(self._env)
        # Workers import fn's module the way this process does.
        path = [os.path.abspath(p or os.curdir) for p in sys.path]
        if self._env.get("PYTHONPATH"):
            path.insert(0, self._env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(path)
        env["PYTHONUNBUFFERED"] = "1"
        env["TF_CONFIG"] = tf_config.to_json()
        parent_end, child_end = socket.socketpair()
        log_path = os.path.join(self._log_dir, f"{task_type}-{task_id}.log")
        command = self._task_command(task_type, task_id, child_end.fileno())
        pass_fds = (child_end.fileno(),)
        if self._private_network is not None:
            command = self._private_network.enter(command)
            pass_fds += self._private_network.fds
        try:
            with open(log_path, "wb") as log:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    pass_fds=pass_fds,
                    # Own process group: killpg reaches anything the task spawns, and
                    # a Ctrl-C in the terminal reaches only this process.
                    start_new_session=True,
                )
        finally:
            child_end.close()
        conn = mp_connection.Connection(parent_end.detach())
        return _Task(task_type, task_id, process, conn, log_path)

    def _wait_ready(self):
        deadline = time.monotonic() + self._start_timeout
        while not all(t.ready for t in self._tasks):
            waiting = [t for t in self._tasks if not t.ready]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stacks = self._dump_stacks()
                names = ", ".join(t.name for t in waiting)
                raise ClusterTimeoutError(
                    f"local_cluster: {names} did not start within "
                    f"{self._start_timeout:g} s (start_timeout); the other tasks would "
                    f"wait for them forever, so the cluster was torn down."
                    f"{self._format_stacks(stacks, self._tasks, start=True)}",
                    pending=[t.name for t in waiting],
                    stacks=stacks,
                )
            for conn in mp_connection.wait([t.conn for t in waiting], remaining):
                task = next(t for t in waiting if t.conn is conn)
                try:
                    kind, info = conn.recv()
                except (EOFError, OSError):
                    code = self._reap_code(task)
                    raise ClusterTaskError(
                        f"local_cluster: {task.name} {_exit_reason(code)} during "
                        f"start-up, before it was ready.\n"
                        f"Output of {task.name} (last lines):\n{_indent(_tail(task.output()))}",
                        task_type=task.task_type,
                        task_id=task.task_id,
                        exitcode=code,
                        output_tail=_tail(task.output()),
                    ) from None
                if kind == "alive":
                    task.alive = True
                elif kind == "ready":
                    task.ready = True
                elif kind == "startup_error":
                    raise ClusterTaskError(
                        f"local_cluster: {task.name} failed during start-up:\n" f"{_indent(info)}",
                        task_type=task.task_type,
                        task_id=task.task_id,
                        remote_traceback=info,
                        output_tail=_tail(task.output()),
                    )

    # -- Calls ---------------------------------------------------------------

    def _call(self, module, qualname, payload):
        self._call_count += 1
        call_id = self._call_count
        call = f"{module}:{qualname}"
        starts = {t.name: t.output_size() for t in self._tasks}
        try:
            for t in self._tasks:
                t.conn.send(("call", call_id, module, qualname, payload))
            results, failures = self._collect(call_id)
            if failures or len(results) < len(self._tasks):
                self._fail(call, results, failures, starts)
            return [results[t.name] for t in self._tasks]
        except BaseException:
            # KeyboardInterrupt, or an error on the way: leave nothing running.
            self._teardown(graceful=False)
            raise

    def _collect(self, call_id):
        """Waits for every task's answer: ({name: result}, [(task, failure)])."""
        results, failures = {}, []
        deadline = time.monotonic() + self._timeout
        pending = list(self._tasks)
        while pending:
            remaining = deadline - time.monotonic()
            if failures:  # The others are probably blocked on the failed task.
                remaining = min(remaining, failures[0][2] + _FAILURE_GRACE_S - time.monotonic())
            if remaining <= 0:
                break
            for conn in mp_connection.wait([t.conn for t in pending], remaining):
                task = next(t for t in pending if t.conn is conn)
                pending.remove(task)
                try:
                    kind, answer_id, body = conn.recv()
                except (EOFError, OSError):
                    failures.append((task, ("died", self._reap_code(task)), time.monotonic()))
                    continue
                assert answer_id == call_id, (answer_id, call_id)
                if kind == "result":
                    try:
                        results[task.name] = pickle.loads(body)
                    except Exception as e:  # pylint: disable=broad-except
                        failures.append(
                            (
                                task,
                                (
                                    "raised",
                                    {
                                        "type": type(e).__name__,
                                        "message": str(e),
                                        "exception": None,
                                        "traceback": f"unpickling the result of {task.name} here failed: "
                                        f"{type(e).__name__}: {e}\n",
                                    },
                                ),
                                time.monotonic(),
                            )
                        )
                else:
                    body["exception"] = _loads_or_none(body["exception"])
                    failures.append((task, ("raised", body), time.monotonic()))
        return results, [(task, failure) for task, failure, _ in failures]

    def _fail(self, call, results, failures, starts):
        """Dumps stacks, tears the tasks down and raises the error for a call."""
        tasks = list(self._tasks)
        failed = {task.name for task, _ in failures}
        pending = [t for t in tasks if t.name not in results and t.name not in failed]
        outputs = {t.name: t.output(starts[t.name]) for t in tasks}
        stacks = self._dump_stacks()
        self._teardown(graceful=False)
        error = self._error(call, tasks, failures, pending, stacks, outputs)
        # The bind failure shows in TF's log, or (when TF_CPP_MIN_LOG_LEVEL hides
        # the log) only in the exception the task raised.
        texts = list(outputs.values()) + [
            f"{info.get('message', '')}\n{info.get('traceback', '')}"
            for _, (how, info) in failures
            if how == "raised"
        ]
        if any(m in text for text in texts for m in _PORT_CLASH_MARKERS):
            raise _PortClash(error)
        self._failure = str(error).splitlines()[0]
        if failures and failures[0][1][0] == "raised":
            raise error from failures[0][1][1].get("exception")
        raise error

    def _error(self, call, tasks, failures, pending, stacks, outputs):
        if not failures:
            names = ", ".join(t.name for t in pending)
            return ClusterTimeoutError(
                f"local_cluster: run({call}) did not finish within {self._timeout:g} s "
                f"(timeout); still running: {names}. The cluster was torn down."
                f"{self._format_outputs(outputs, pending)}"
                f"{self._format_stacks(stacks, tasks)}",
                pending=[t.name for t in pending],
                stacks=stacks,
            )
        task, (how, info) = failures[0]
        if how == "died":
            headline = f"{task.name} {_exit_reason(info)} during run({call})"
            exitcode, remote_tb = info, ""
            detail = ""
        else:
            headline = f"{task.name} raised {info['type']}: {info['message']}"
            exitcode, remote_tb = None, info["traceback"]
            detail = f"\nTraceback in {task.name}:\n{_indent(remote_tb)}"
        others = "".join(
            f"\n{t.name} also {_exit_reason(i) if h == 'died' else 'raised ' + i['type'] + ': ' + i['message']}."
            for t, (h, i) in failures[1:]
        )
        if pending:
            others += (
                f"\nStill running when the call failed: " f"{', '.join(t.name for t in pending)}."
            )
        return ClusterTaskError(
            f"local_cluster: {headline}. The cluster was torn down.{others}{detail}"
            f"{self._format_outputs(outputs, [task] + pending)}"
            f"{self._format_stacks(stacks, tasks) if how == 'died' or pending else ''}",
            task_type=task.task_type,
            task_id=task.task_id,
            exitcode=exitcode,
            remote_traceback=remote_tb,
            output_tail=_tail(outputs[task.name]),
            stacks=stacks,
        )

    @staticmethod
    def _format_outputs(outputs, tasks):
        return "".join(
            f"\nOutput of {t.name} during the call (last lines):\n"
            f"{_indent(_tail(outputs[t.name]))}"
            for t in tasks
        )

    @staticmethod
    def _format_stacks(stacks, tasks, start=False):
        parts = []
        for t in tasks:
            if t.name in stacks:
                parts.append(f"\nPython stacks of {t.name}:\n{_indent(stacks[t.name])}")
            else:
                state = _exit_reason(t.process.poll())
                if start and not t.alive and t.process.poll() is None:
                    state = "never said hello"
                parts.append(f"\nPython stacks of {t.name}: none ({state}).")
        return "".join(parts)

    # -- Stacks and teardown -------------------------------------------------

    def _dump_stacks(self, wait_s=2.0):
        """{task name: stacks} from the tasks that can dump them (SIGUSR1)."""
        live = [t for t in self._tasks if t.alive and t.process.poll() is None]
        starts = {}
        for t in live:
            starts[t.name] = t.output_size()
            try:
                os.kill(t.process.pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        # faulthandler writes from the signal handler, in one burst per task.
        deadline = time.monotonic() + wait_s
        sizes = {}
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = {t.name: t.output_size() for t in live}
            if all(now[n] > starts[n] for n in now) and now == sizes:
                break
            sizes = now
        return {
            t.name: _drop_watchdog(t.output(starts[t.name]))
            or "(no dump: it did not answer SIGUSR1)"
            for t in live
        }

    def _reap_code(self, task):
        try:
            return task.process.wait(timeout=_EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            return None

    def _teardown(self, graceful):
        tasks, self._tasks = self._tasks, []
        if graceful:
            for t in tasks:
                try:
                    t.conn.send(("exit", 0, None))
                except (OSError, ValueError):
                    pass
            deadline = time.monotonic() + _EXIT_GRACE_S
            for t in tasks:
                # Wait for the task to close its end, without reaping it: the
                # process group id stays valid for killpg below.
                try:
                    if t.conn.poll(max(0.0, deadline - time.monotonic())):
                        t.conn.recv()
                except (EOFError, OSError):
                    pass
        # start_new_session made each task's pid its process group id. Linux
        # keeps that id reserved while any member lives, even once the task
        # itself was reaped, so killpg reaches what it spawned and no stranger.
        for t in tasks:
            try:
                os.killpg(t.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for t in tasks:
            try:
                t.process.wait(timeout=10)
            except subprocess.TimeoutExpired:  # Unkillable (D state): say so.
                print(
                    f"local_cluster: {t.name} (pid {t.process.pid}) did not die " f"after SIGKILL.",
                    file=sys.stderr,
                )
            t.conn.close()
        if self._private_network is not None:
            # Goes with its last task: all of them are reaped by now.
            self._private_network.close()
            self._private_network = None
        if self._log_dir is not None and not self._tasks:
            for name in os.listdir(self._log_dir):
                os.unlink(os.path.join(self._log_dir, name))
            os.rmdir(self._log_dir)
            self._log_dir = None
        _LIVE_CLUSTERS.discard(self)


def local_cluster(
    num_workers=2,
    *,
    has_chief=False,
    devices_per_worker=1,
    timeout=120,
    env=None,
    start_timeout=None,
    network="auto",
) -> LocalCluster:
    """A cluster of local processes that runs a function in every task.

    Args:
        num_workers: number of "worker" tasks (>= 1).
        has_chief: also start a "chief" task; it comes first in results.
        devices_per_worker: virtual CPU devices each task gets (>= 1), set up
            before the function runs any op.
        timeout: seconds a `run` may take before it fails with every task's stack.
        env: extra environment variables for the tasks (str -> str). TF_CONFIG is
            written by the cluster for each task and cannot be given here.
        start_timeout: seconds the tasks may take to start (import TensorFlow);
            default max(timeout, 60).
        network: "private": every task runs in one network namespace of the
            cluster's own (Linux: root, or user namespaces enabled), so their
            gRPC servers are reachable only from each other, not from this
            process or the network; ClusterError at start() where that is
            unavailable. "host": the tasks share this process's network, their
            servers listen on all interfaces (TensorFlow binds 0.0.0.0).
            "auto" (default): "private" where available, else "host" with a
            RuntimeWarning saying why.

    Returns:
        A `LocalCluster`, not started: use it in a `with` statement, or call
        `start()`/`stop()`.
    """
    return LocalCluster(
        num_workers,
        has_chief=has_chief,
        devices_per_worker=devices_per_worker,
        timeout=timeout,
        env=env,
        start_timeout=start_timeout,
        network=network,
    )


# --------------------------------------------------------------------------
# Argument checks


def _positive_seconds(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds; got {_validate.show(value)}.")
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(
            f"{name} must be a finite number of seconds > 0; got {_validate.show(value)}. "
            f"Every call needs a bound so that a hung task cannot hang the caller."
        )
    return float(value)


def _check_network(network):
    if not isinstance(network, str) or network not in _NETWORKS:
        raise ValueError(
            f"network must be one of {', '.join(repr(n) for n in _NETWORKS)}; got "
            f"{_validate.show(network)}. 'private' keeps the tasks' servers off the host's "
            f"interfaces, 'host' shares this process's network, 'auto' picks private "
            f"where the platform allows it."
        )
    return network


def _check_env(env):
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise TypeError(f"env must be a dict of str -> str; got {_validate.show(env)}.")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                f"env must map str -> str; env[{key!r}] = {_validate.show(value)}. Convert "
                f"values with str()."
            )
    if "TF_CONFIG" in env:
        # Say what is wrong with it first, if anything: a malformed TF_CONFIG
        # usually means the caller meant to configure the cluster through it.
        parse_tf_config(env["TF_CONFIG"])
        raise ValueError(
            "env['TF_CONFIG'] is set, but local_cluster writes TF_CONFIG for each "
            "task itself (127.0.0.1 ports it picks). Remove it from env and use "
            "num_workers= and has_chief= to shape the cluster."
        )
    return dict(env)
