"""`LocalCluster`: start the tasks, run a function in all of them, tear them down."""

from __future__ import annotations

import pickle
import time
from multiprocessing import connection as mp_connection

from compat_distribute import _validate
from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import checks
from compat_distribute.testing.cluster import launcher as launcher_lib
from compat_distribute.testing.cluster import netns
from compat_distribute.testing.cluster import ports
from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster import task as task_lib
from compat_distribute.testing.cluster import tf_config
from compat_distribute.testing.cluster.errors import ClusterError

__all__ = ["LocalCluster", "local_cluster"]

# After one task fails, how long the others get to finish before they are
# presumed blocked on the failed peer (collectives wait for every task).
_FAILURE_GRACE_S = 1.0
_WORKER_MAIN = "compat_distribute.testing.cluster.worker"


class _PortClash(Exception):
    """A task's gRPC server could not bind its port: restart with new ports."""


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
        deadlines.scale()  # A bad $COMPAT_DISTRIBUTE_TIMEOUT_SCALE fails here.
        self._launcher = launcher_lib.Launcher(
            network=netns.check(network),
            start_timeout=self._start_timeout,
            env=checks.env(env),
            hooks=checks.hooks(hooks),
            who="local_cluster(network='auto') runs its tasks",
            opt_out="Pass network='host'",
        )
        self._cluster_spec: dict[str, tuple[str, ...]] = {}
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
        return self._launcher.pids

    @property
    def zygote_pid(self) -> int | None:
        """The process that forked the tasks (see docs/clusters.md); None when
        they are fresh processes, or not running."""
        return self._launcher.zygote_pid

    @property
    def running(self) -> bool:
        """Whether every task of the cluster runs: False before `start()`,
        after a fault, and once any task's process has ended."""
        tasks = self._launcher.tasks
        return len(tasks) == len(self._task_keys()) and not any(t.has_exited() for t in tasks)

    @property
    def directory(self) -> str | None:
        """The running cluster's temporary directory (logs, each task's TMPDIR)."""
        return self._launcher.directory

    @property
    def network(self) -> str:
        """ "private" or "host": where the tasks' gRPC servers listen.

        "private": in a network namespace of the cluster's own, reachable only
        by its tasks; "host": on every interface of this machine (TensorFlow
        binds 0.0.0.0). Resolving network="auto" probes the platform once per
        process, and warns when it falls back to "host".
        """
        return self._launcher.network

    def output(self, task_type, task_id) -> str:
        """Everything the task has written to stdout/stderr while it runs."""
        for t in self._launcher.tasks:
            if (t.task_type, t.task_id) == (task_type, task_id):
                return t.output()
        raise ValueError(
            f"no running task {task_type} {task_id}; tasks: "
            f"{', '.join(self.task_names) if self.running else 'none (not running)'}."
        )

    def start(self):
        """Launches every task and waits until each has imported TensorFlow."""
        if not self.running:
            self._launch()
        return self

    def stop(self):
        """Asks every task to exit, kills their process groups, reaps them."""
        self._launcher.stop(graceful=True)
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
        if not self.running:
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

    def _task_spec(self, task_type, task_id):
        env = self._launcher.process_env(tf_config.task_name(task_type, task_id))
        env["TF_CONFIG"] = tf_config.for_task(self._cluster_spec, task_type, task_id).to_json()
        argv = ("--devices", str(self._devices_per_worker))
        return task_lib.TaskSpec(task_type, task_id, _WORKER_MAIN, argv, env)

    def _launch(self):
        self._failure = None
        with self._launcher.launching() as launcher:
            keys = self._task_keys()
            self._cluster_spec = tf_config.cluster_spec(keys, launcher.pick_ports(len(keys)))
            launcher.spawn([self._task_spec(*key) for key in keys])
            launcher.wait_ready()

    # -- Calls ---------------------------------------------------------------

    def _call(self, call_id, call, function):
        """Sends the pickled `call` to every task; their results in task order."""
        tasks = self._launcher.tasks
        starts = {t.name: t.output_size() for t in tasks}
        try:
            for t in tasks:
                t.conn.send_bytes(call)
            results, failures = self._collect(call_id)
            if failures or len(results) < len(tasks):
                self._fail(function, results, failures, starts)
            return [results[t.name] for t in tasks]
        except BaseException:
            # KeyboardInterrupt, or an error on the way: leave nothing running.
            self._launcher.stop(graceful=False)
            raise

    def _collect(self, call_id):
        """Every task's answer: ({name: result}, [TaskRaised | TaskDied, ...])."""
        results, failures = {}, []
        first_failure_at = None
        deadline = time.monotonic() + deadlines.scaled(self._timeout)
        pending = list(self._launcher.tasks)
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
            return protocol.TaskDied(task.name, task.wait(launcher_lib.EXIT_GRACE_S))
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
        tasks = list(self._launcher.tasks)
        failed = {f.task for f in failures}
        pending = [t for t in tasks if t.name not in results and t.name not in failed]
        outputs = {t.name: t.output(starts[t.name]) for t in tasks}
        stacks = launcher_lib.dump_stacks(tasks)
        # Read before the teardown: a killed task is no longer stopped.
        stopped = {t.name for t in tasks if t.stopped()}
        # The tasks die with their zygote: then it is the one to name.
        died = self._launcher.zygote_failure(f"during run({function})")
        self._launcher.stop(graceful=False)
        if died is not None:
            self._failure = str(died).splitlines()[0]
            raise died
        if failures:
            error = report.call_failure(
                function, tasks, failures, pending, stacks, outputs, stopped
            )
        else:
            error = report.call_timeout(
                function,
                deadlines.describe(self._timeout),
                tasks,
                pending,
                stacks,
                outputs,
                stopped,
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
            This and start_timeout are multiplied by $COMPAT_DISTRIBUTE_TIMEOUT_SCALE
            (default 1; see `compat_distribute.testing.deadlines`).
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
