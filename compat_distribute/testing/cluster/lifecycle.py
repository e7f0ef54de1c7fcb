"""`LocalCluster`: start the tasks, run a function in all of them, tear them down."""

from __future__ import annotations

import atexit
import os
import pickle
import sys
import time
import weakref
from multiprocessing import connection as mp_connection

from compat_distribute import _validate
from compat_distribute.testing.cluster import checks
from compat_distribute.testing.cluster import netns
from compat_distribute.testing.cluster import ports
from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster import task as task_lib
from compat_distribute.testing.cluster import tf_config
from compat_distribute.testing.cluster import workdir as workdir_lib
from compat_distribute.testing.cluster.errors import ClusterError

# After one task fails, how long the others get to finish before they are
# presumed blocked on the failed peer (collectives wait for every task).
_FAILURE_GRACE_S = 1.0
_WORKER_MAIN = "compat_distribute.testing.cluster.worker"


class _PortClash(Exception):
    """A task's gRPC server could not bind its port: restart with new ports."""


_LIVE_CLUSTERS = weakref.WeakSet()


@atexit.register
def _stop_live_clusters():
    for c in list(_LIVE_CLUSTERS):
        c.stop()


def running_clusters():
    """Every cluster of this process whose tasks run."""
    return [c for c in list(_LIVE_CLUSTERS) if c.running]


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
        hooks=None,
    ):
        self._num_workers = checks.num_workers(num_workers)
        if not isinstance(has_chief, bool):
            raise TypeError(f"has_chief must be True or False; got {_validate.show(has_chief)}.")
        self._has_chief = has_chief
        self._devices_per_worker = checks.devices_per_worker(devices_per_worker)
        self._timeout = checks.positive_seconds("timeout", timeout)
        self._start_timeout = (
            max(self._timeout, 60.0)
            if start_timeout is None
            else checks.positive_seconds("start_timeout", start_timeout)
        )
        self._env = checks.env(env)
        self._network = netns.check(network)
        self._hooks = checks.hooks(hooks)
        self._private_network: netns.PrivateNetwork | None = None
        self._tasks: list[task_lib.Task] = []
        # Processes launched with the tasks that are no task of the cluster
        # spec (LocalServers' relay): started, watched and stopped with them.
        self._helpers: list[task_lib.Task] = []
        self._cluster_spec: dict[str, tuple[str, ...]] = {}
        self._workdir: workdir_lib.WorkDir | None = None
        self._failure = None  # Why the last tasks were torn down, if a fault.
        self._call_count = 0

    # -- Public surface ------------------------------------------------------

    @property
    def task_names(self) -> list[str]:
        """Tasks in result order: "chief 0" first, then "worker 0", "worker 1"..."""
        return [tf_config.task_name(*key) for key in self._task_keys()]

    @property
    def cluster_spec(self) -> dict[str, tuple[str, ...]]:
        """{job: ("127.0.0.1:port", ...)} of the running tasks."""
        return dict(self._cluster_spec)

    @property
    def pids(self) -> list[int]:
        """Process ids of the running tasks, in task order."""
        return [t.pid for t in self._tasks]

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    @property
    def directory(self) -> str | None:
        """The running cluster's temporary directory (logs, each task's TMPDIR)."""
        return None if self._workdir is None else self._workdir.path

    @property
    def network(self) -> str:
        """ "private" or "host": where the tasks' gRPC servers listen.

        "private": in a network namespace of the cluster's own, reachable only
        by its tasks; "host": on every interface of this machine (TensorFlow
        binds 0.0.0.0). Resolving network="auto" probes the platform once per
        process, and warns when it falls back to "host".
        """
        self._network = netns.choose(self._network)
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
        if not self._tasks:
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
                message), died, or was stopped; the cluster is torn down.
            ClusterTimeoutError: some task did not answer within `timeout`
                seconds; every task's stack is in the message; torn down.
            ClusterError: the cluster was torn down by an earlier fault.
        """
        module, qualname = protocol.function_reference(fn)
        self._call_count += 1
        call = protocol.dumps_call(self._call_count, module, qualname, args, kwargs)
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
        for attempt in range(ports.PORT_CLASH_RETRIES + 1):
            try:
                return self._call(self._call_count, call, f"{module}:{qualname}")
            except _PortClash as clash:
                if attempt == ports.PORT_CLASH_RETRIES:
                    error = clash.args[0]
                    error.args = (
                        f"{error.args[0]}\nTensorFlow could not bind a port in "
                        f"{attempt + 1} launches with fresh ports.",
                    )
                    self._failure = str(error).splitlines()[0]
                    raise error from None
                self._launch()
        raise AssertionError("unreachable")

    # -- Start-up ------------------------------------------------------------

    def _task_keys(self):
        return tf_config.task_keys(self._num_workers, self._has_chief)

    def _process_env(self, name):
        """The environment of the process `name`, a task or a helper."""
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # What a task writes to the temp dir goes with the cluster.
        env["TMPDIR"] = self._workdir.task_temp_dir(name)
        env.update(self._env)
        # Workers import fn's module the way this process does.
        path = [os.path.abspath(p or os.curdir) for p in sys.path]
        if self._env.get("PYTHONPATH"):
            path.insert(0, self._env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(path)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _task_spec(self, task_type, task_id):
        env = self._process_env(tf_config.task_name(task_type, task_id))
        env["TF_CONFIG"] = tf_config.for_task(self._cluster_spec, task_type, task_id).to_json()
        argv = ("--devices", str(self._devices_per_worker))
        return task_lib.TaskSpec(task_type, task_id, _WORKER_MAIN, argv, env)

    def _pick_ports(self, count):
        # Picked on the host even for a private network, where any port is
        # free: still distinct within the cluster, and the same code path.
        return (self._hooks.pick_ports or ports.pick_ports)(count)

    def _helper_specs(self):
        """TaskSpecs of the helper processes to launch with the tasks."""
        return []

    def _release_launch_resources(self):
        """Closes what this process kept for the launch (once it is launched or failed)."""

    def _launch(self):
        network = self.network
        self._teardown(graceful=False)
        workdir_lib.reap_abandoned()
        keys = self._task_keys()
        self._failure = None
        _LIVE_CLUSTERS.add(self)
        try:
            if network == "private":
                self._private_network = netns.make()
            self._cluster_spec = tf_config.cluster_spec(keys, self._pick_ports(len(keys)))
            self._workdir = workdir_lib.WorkDir()
            specs = [self._task_spec(*key) for key in keys] + self._helper_specs()
            try:
                launched = task_lib.launch_all(
                    specs, workdir=self._workdir, network=self._private_network, hooks=self._hooks
                )
            finally:
                self._release_launch_resources()
            self._tasks, self._helpers = launched[: len(keys)], launched[len(keys) :]
            task_lib.wait_ready(launched, self._start_timeout)
        except BaseException:
            self._teardown(graceful=False)
            raise

    # -- Calls ---------------------------------------------------------------

    def _call(self, call_id, call, function):
        """Sends the pickled `call` to every task; their results in task order."""
        starts = {t.name: t.output_size() for t in self._tasks}
        try:
            for t in self._tasks:
                t.conn.send_bytes(call)
            results, failures = self._collect(call_id)
            if failures or len(results) < len(self._tasks):
                self._fail(function, results, failures, starts)
            return [results[t.name] for t in self._tasks]
        except BaseException:
            # KeyboardInterrupt, or an error on the way: leave nothing running.
            self._teardown(graceful=False)
            raise

    def _collect(self, call_id):
        """Every task's answer: ({name: result}, [TaskRaised | TaskDied, ...])."""
        results, failures = {}, []
        first_failure_at = None
        deadline = time.monotonic() + self._timeout
        pending = list(self._tasks)
        while pending:
            remaining = deadline - time.monotonic()
            if failures:  # The others are probably blocked on the failed task.
                remaining = min(remaining, first_failure_at + _FAILURE_GRACE_S - time.monotonic())
            if remaining <= 0:
                break
            for conn in mp_connection.wait([t.conn for t in pending], remaining):
                task = next(t for t in pending if t.conn is conn)
                pending.remove(task)
                failure = self._receive(task, call_id, results)
                if failure is not None:
                    failures.append(failure)
                    first_failure_at = first_failure_at or time.monotonic()
        return results, failures

    @staticmethod
    def _receive(task, call_id, results):
        """Stores `task`'s result in `results`, or returns its failure."""
        try:
            data = task.conn.recv_bytes()
        except (EOFError, OSError):
            return protocol.TaskDied(task.name, task.wait(task_lib.EXIT_GRACE_S))
        try:
            answer = pickle.loads(data)
        except Exception as e:  # pylint: disable=broad-except
            why = f"unpickling the result of {task.name} here failed: {type(e).__name__}: {e}\n"
            return protocol.TaskRaised(
                task.name, protocol.Raised(call_id, type(e).__name__, str(e), why)
            )
        if answer.call_id != call_id:
            raise AssertionError(f"{task.name} answered call {answer.call_id}, not {call_id}")
        if isinstance(answer, protocol.Raised):
            return protocol.TaskRaised(task.name, answer)
        results[task.name] = answer.value
        return None

    def _fail(self, function, results, failures, starts):
        """Dumps stacks, tears the tasks down and raises the error for a call of
        `function` ("module:qualname")."""
        tasks = list(self._tasks)
        failed = {f.task for f in failures}
        pending = [t for t in tasks if t.name not in results and t.name not in failed]
        outputs = {t.name: t.output(starts[t.name]) for t in tasks}
        stacks = task_lib.dump_stacks(self._tasks)
        # Read before the teardown: a killed task is no longer stopped.
        stopped = {t.name for t in tasks if t.stopped()}
        self._teardown(graceful=False)
        if failures:
            error = report.call_failure(
                function, tasks, failures, pending, stacks, outputs, stopped
            )
        else:
            error = report.call_timeout(
                function, self._timeout, tasks, pending, stacks, outputs, stopped
            )
        # The bind failure shows in TF's log, or (when TF_CPP_MIN_LOG_LEVEL hides
        # the log) only in the exception the task raised.
        texts = list(outputs.values()) + [
            f"{f.raised.message}\n{f.raised.traceback}"
            for f in failures
            if isinstance(f, protocol.TaskRaised)
        ]
        if any(ports.mentions_port_clash(text) for text in texts):
            raise _PortClash(error)
        self._failure = str(error).splitlines()[0]
        if failures and isinstance(failures[0], protocol.TaskRaised) and not stopped:
            raise error from failures[0].raised.unpickled_exception()
        raise error

    # -- Teardown ------------------------------------------------------------

    def _teardown(self, graceful):
        tasks, self._tasks, self._helpers = self._tasks + self._helpers, [], []
        task_lib.stop_all(tasks, graceful=graceful)
        self._release_launch_resources()
        if self._private_network is not None:
            # Goes with its last task: all of them are reaped by now.
            self._private_network.close()
            self._private_network = None
        if self._workdir is not None:
            self._workdir.remove()
            self._workdir = None
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
    hooks=None,
) -> LocalCluster:
    """A cluster of local processes that runs a function in every task.

    Args:
        num_workers: number of "worker" tasks (1 to 64).
        has_chief: also start a "chief" task; it comes first in results.
        devices_per_worker: virtual CPU devices each task gets (1 to 256), set up
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
        hooks: a `LaunchHooks` through which tests inject faults into the
            launches (ports, commands); None for none.

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
        hooks=hooks,
    )
