"""`LocalCluster`: start the tasks, run functions in them, control each task, tear them down."""

from __future__ import annotations

import inspect
import signal
import sys
import threading
import time

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import calls
from compat_distribute.testing.cluster import checks
from compat_distribute.testing.cluster import launcher as launcher_lib
from compat_distribute.testing.cluster import netns
from compat_distribute.testing.cluster import output as output_lib
from compat_distribute.testing.cluster import ports
from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster import task as task_lib
from compat_distribute.testing.cluster import tf_config
from compat_distribute.testing.cluster import watcher as watcher_lib
from compat_distribute.testing.cluster.errors import ClusterError
from compat_distribute.testing.cluster.errors import ClusterTimeoutError

__all__ = ["LocalCluster", "local_cluster"]

_WORKER_MAIN = "compat_distribute.testing.cluster.worker"
# How long kill_task waits for the task to end (scaled).
_KILL_WAIT_S = 10.0


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
        ps=0,
        evaluator=False,
        devices_per_worker=1,
        timeout=120,
        env=None,
        task_env=None,
        start_timeout=None,
        network="auto",
        hooks=None,
        auto_restart=False,
        chief_ends_job=False,
        stream_output=False,
    ):
        self._num_workers = checks.num_workers(num_workers)
        self._has_chief = checks.flag("has_chief", has_chief)
        self._ps = checks.task_count("ps", ps)
        self._evaluator = checks.flag("evaluator", evaluator)
        self._devices_per_worker = checks.devices_per_worker(devices_per_worker)
        self._timeout = checks.positive_seconds("timeout", timeout)
        self._start_timeout = (
            max(self._timeout, 60.0)
            if start_timeout is None
            else checks.positive_seconds("start_timeout", start_timeout)
        )
        self._auto_restart = checks.flag("auto_restart", auto_restart)
        self._chief_ends_job = checks.flag("chief_ends_job", chief_ends_job)
        self._stream_output = checks.flag("stream_output", stream_output)
        deadlines.scale()  # A bad $COMPAT_DISTRIBUTE_TIMEOUT_SCALE fails here.
        self._launcher = launcher_lib.Launcher(
            network=netns.check(network),
            start_timeout=self._start_timeout,
            env=checks.env(env),
            hooks=checks.hooks(hooks),
            who="local_cluster(network='auto') runs its tasks",
            opt_out="Pass network='host'",
        )
        self._keys = tf_config.task_keys(self._num_workers, self._has_chief, self._ps, self._evaluator)
        hook = checks.task_env_hook(task_env)
        self._task_envs = {key: {} if hook is None else checks.task_env(hook, *key) for key in self._keys}
        self._cluster_spec: dict[str, tuple[str, ...]] = {}
        self._specs: dict[tuple[str, int], task_lib.TaskSpec] = {}
        self._down: dict[tuple[str, int], str] = {}  # Why a launched task does not run.
        self._killing: dict[tuple[str, int], str] = {}  # kill_task's signal, until it ended.
        self._died: dict[tuple[str, int], tuple] = {}  # (pid, code, output) of a death between runs.
        self._failure = None  # Why the last tasks were torn down, if they were.
        self.job_ended = None  # Why the chief's end ended the job (chief_ends_job).
        self._call_count = 0
        self._lock = threading.RLock()  # A run, a start, a restart: one at a time.
        self._watcher = None
        self._in_call = False  # A run's call is out (see `kill_task`).

    # -- Public surface ------------------------------------------------------

    @property
    def task_names(self) -> list[str]:
        """Tasks in result order: "chief 0", "worker 0", "worker 1"..., "ps 0"..., "evaluator 0"."""
        return [tf_config.task_name(*key) for key in self._keys]

    @property
    def cluster_spec(self) -> dict[str, tuple[str, ...]]:
        """{job: ("127.0.0.1:port", ...)} of the tasks."""
        return dict(self._cluster_spec)

    @property
    def pids(self) -> list[int | None]:
        """Process ids of the tasks, in task order; None for a task that does not run."""
        return [None if task is None else task.pid for task in map(self._task, self._keys)]

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
        return len(tasks) == len(self._keys) and not any(t.has_exited() for t in tasks)

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
        """Everything the task's processes have written to stdout/stderr since `start()`."""
        key = checks.task_key(self._keys, task_type, task_id)
        if not self._launcher.launched:
            raise ClusterError(
                "this local_cluster is not running, and its tasks' logs went with it (a "
                "fault keeps them: the error names where)."
            )
        with open(self._launcher.workdir.log_path(tf_config.task_name(*key)), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def start(self):
        """Launches every task that does not run, and waits until each is ready."""
        with self._lock:
            if not self._launcher.launched:
                self._launch(self._keys)
            elif self._down:
                self._start_down(list(self._down))
        return self

    def start_task(self, task_type, task_id):
        """Starts one task: alone, before `start()` (the others start with
        `start()` or their own `start_task`), or again after `kill_task`,
        with the same address and TF_CONFIG. A running task is left alone."""
        key = checks.task_key(self._keys, task_type, task_id)
        with self._lock:
            if not self._launcher.launched:
                self._launch([key])
            elif key in self._down:
                self._start_down([key])
        return self

    def kill_task(self, task_type, task_id, sig=None):
        """Sends `sig` (default SIGKILL) to the task's process group and waits
        until it has ended; safe to call from another thread during a run.

        The task stays down until `start_task` (with auto_restart: a task that
        ended with a non-zero status is started again at once). A run that
        needs it fails naming it.
        """
        key = checks.task_key(self._keys, task_type, task_id)
        sig = checks.task_signal(signal.SIGKILL if sig is None else sig)
        task = self._task(key)
        if task is None or task.has_exited():
            raise ClusterError(
                f"local_cluster: {tf_config.task_name(*key)} does not run "
                f"({self._down.get(key, 'it has ended' if self._launcher.launched else 'not started')}): "
                f"nothing to kill."
            )
        self._killing[key] = f"kill_task({sig.name})"
        task.signal_group(sig)
        deadline = time.monotonic() + deadlines.scaled(_KILL_WAIT_S)
        while not task.has_exited() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not task.has_exited():
            self._killing.pop(key, None)
            raise ClusterTimeoutError(
                f"local_cluster: {task.name} (pid {task.pid}) did not end within "
                f"{deadlines.describe(_KILL_WAIT_S)} of {sig.name}; it still runs. "
                f"kill_task({task.task_type!r}, {task.task_id}) with the default SIGKILL ends it.",
                pending=[task.name],
                stacks={},
            )
        # The watcher holds the lock for a moment: wait for it. A run holds it
        # throughout and meets the death itself (or the watcher after it).
        while not self._lock.acquire(timeout=watcher_lib.INTERVAL_S):
            if self._in_call:
                return
        try:
            self._notice_deaths()
        finally:
            self._lock.release()

    def stop(self):
        """Asks every task to exit, kills their process groups, reaps them."""
        self._stop_watcher()
        with self._lock:
            self._launcher.stop(graceful=True)
            self._failure = None
            self._forget_tasks()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()

    def run(self, fn, /, *args, **kwargs):
        """Runs `fn(*args, **kwargs)` in every task; returns results in task order.

        `fn` must be importable by module:qualname from a fresh process (a
        module-level function); args, kwargs and each result must pickle.

        Raises:
            ClusterTaskError: a task raised (the error is also of the task's
                exception class, with its traceback and output in the message),
                died, or was stopped; the cluster is torn down.
            ClusterTimeoutError: some task did not answer within `timeout`
                seconds; every task's stack is in the message; torn down.
            ClusterError: the cluster was torn down by an earlier fault, or a
                task it needs does not run.
        """
        return self.run_on(self._keys, fn, *args, **kwargs)

    def run_on(self, tasks, fn, /, *args, **kwargs):
        """`run` in some tasks only: `tasks` is a job name ("chief"), a
        (task_type, task_id) pair, or a list of those; results in task order."""
        keys = checks.task_selection(tasks, self._keys)
        module, qualname = protocol.function_reference(fn)
        self._call_count += 1
        call = protocol.dumps_call(self._call_count, module, qualname, args, kwargs)
        function = f"{module}:{qualname}"
        with self._lock:
            self._check_can_call(keys, function)
            for attempt in range(ports.PORT_CLASH_RETRIES + 1):
                try:
                    return self._call(keys, self._call_count, call, function)
                except _PortClash as clash:
                    if attempt == ports.PORT_CLASH_RETRIES:
                        error = clash.args[0]
                        error.args = (
                            f"{error.args[0]}\nTensorFlow could not bind a port in "
                            f"{attempt + 1} launches with fresh ports.",
                        )
                        self._failure = f"after a fault ({str(error).splitlines()[0]})"
                        raise error from None
                    self._launch(self._keys)
        raise AssertionError("unreachable")

    # -- Start-up ------------------------------------------------------------

    def _task(self, key):
        return next((t for t in self._launcher.tasks if t.key == key), None)

    def _task_spec(self, task_type, task_id):
        env = self._launcher.process_env(tf_config.task_name(task_type, task_id))
        env.update(self._task_envs[task_type, task_id])
        env["TF_CONFIG"] = tf_config.for_task(self._cluster_spec, task_type, task_id).to_json()
        argv = ("--devices", str(self._devices_per_worker))
        if self._ps and task_type in tf_config.SERVING_JOBS:
            argv += ("--serve",)  # As TensorFlow's parameter-server training has them.
        return task_lib.TaskSpec(task_type, task_id, _WORKER_MAIN, argv, env)

    def _launch(self, keys):
        """A fresh launch (new ports) that starts the tasks `keys`."""
        self._stop_watcher()
        self._failure = self.job_ended = None
        self._forget_tasks()
        with self._launcher.launching() as launcher:
            named = tf_config.in_cluster_spec(self._keys)
            self._cluster_spec = tf_config.cluster_spec(named, launcher.pick_ports(len(named)))
            self._specs = {key: self._task_spec(*key) for key in self._keys}
            # The zygote is for every task, those `start()` starts later included.
            launcher.spawn([self._specs[key] for key in keys], planned=self._specs.values())
            launcher.wait_ready()
        self._down = {key: "not started" for key in self._keys if key not in keys}
        streamer = None
        if self._stream_output:
            logs = {spec.name: self._launcher.workdir.log_path(spec.name) for spec in self._specs.values()}
            streamer = output_lib.Streamer(logs)
        self._watcher = watcher_lib.Watcher(self._lock, self._notice_deaths, streamer)

    def _start_down(self, keys):
        try:
            started = self._launcher.spawn([self._specs[key] for key in keys])
            for key in keys:
                del self._down[key]
            self._launcher.wait_ready(started)
        except BaseException:
            self._teardown("after a failed start")
            raise

    def _forget_tasks(self):
        self._down, self._killing, self._died = {}, {}, {}

    # -- Tasks that end --------------------------------------------------------

    def tasks(self):
        """Every running task, in task order (for `calls.collect`)."""
        return [task for task in map(self._task, self._keys) if task is not None]

    def may_restart_after_raise(self):
        return self._auto_restart

    def on_death(self, task, code, may_restart=True):
        """What becomes of `task`, whose process ended with `code` (see
        `calls.collect`): "restart", "down", "ended" or "fault"."""
        killed_by = self._killing.pop(task.key, None)
        if self._chief_ends_job and task.task_type == "chief":
            if not (self._auto_restart and code != 0):
                self.job_ended = (
                    f"{task.name} {report.exit_reason(code)}, and chief_ends_job=True ends "
                    f"the job with it"
                )
                return "ended"
        if self._auto_restart and code != 0 and may_restart:
            return "restart"
        if killed_by is not None:
            self._launcher.discard(task)
            self._down[task.key] = f"{report.exit_reason(code)}, by {killed_by}"
            return "down"
        return "fault"

    def restart(self, task, why):
        """`task` again, as a new process with the same address and TF_CONFIG (auto_restart)."""
        old_pid = task.pid
        new = self._launcher.respawn(task)
        print(
            f"local_cluster: {task.name} (pid {old_pid}) {why}; auto_restart started it "
            f"again as pid {new.pid}.",
            file=sys.stderr,
            flush=True,
        )
        self._launcher.wait_ready([new])
        return new

    def _notice_deaths(self):
        """Deals with the tasks that ended outside a run (the lock is held)."""
        if not self._launcher.launched or launcher_lib.ENDING.is_set():
            return
        for task in list(self._launcher.tasks):
            if not task.has_exited():
                continue
            code = task.wait(launcher_lib.EXIT_GRACE_S)
            verdict = self.on_death(task, code)
            if verdict == "restart":
                self.restart(task, report.exit_reason(code))
            if verdict == "ended":
                self._teardown(f"when {self.job_ended}")
                return
            if verdict == "fault" and task.key not in self._died:
                self._died[task.key] = (task.pid, code, task.output(task.output_start))
                print(
                    f"local_cluster: {task.name} (pid {task.pid}) {self._launcher.exit_reason(task, code)} "
                    f"between runs; the next run raises ClusterTaskError naming it.",
                    file=sys.stderr,
                    flush=True,
                )

    def _stop_watcher(self):
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None

    # -- Calls ---------------------------------------------------------------

    def _check_can_call(self, keys, function):
        if self._failure is not None:
            raise report.torn_down(self._failure)
        if not self._launcher.launched:
            raise report.not_running()
        self._notice_deaths()
        if self._failure is not None:  # The job ended meanwhile.
            self._check_can_call(keys, function)
        if self._died:
            key, (pid, code, output) = next(iter(self._died.items()))
            logs = self._keep_logs()
            error = report.died_between_runs(
                tf_config.task_name(*key), key, pid, code, function, output, logs
            )
            self._teardown(f"after a fault ({str(error).splitlines()[0]})")
            raise error
        down = [key for key in keys if key in self._down]
        if down:
            why = {tf_config.task_name(*key): self._down[key] for key in down}
            raise report.needs_tasks_down(function, why, down[0])

    def _call(self, keys, call_id, call, function):
        """Sends the pickled `call` to the tasks `keys`; their results in task order."""
        starts = {t.name: t.output_size() for t in self._launcher.tasks}
        self._in_call = True
        try:
            targets = [self._task(key) for key in keys]
            outcome = calls.collect(self, targets, call, call_id, self._timeout)
            if outcome.job_ended:
                self._teardown(f"when {outcome.job_ended}")
                raise ClusterError(
                    f"local_cluster: {outcome.job_ended}: every task was stopped during "
                    f"run({function})."
                )
            if outcome.failures or outcome.pending:
                self._fail(function, outcome, starts)
            return [outcome.results[tf_config.task_name(*key)] for key in keys]
        except BaseException:
            # KeyboardInterrupt, or an error on the way: leave nothing running.
            self._teardown(self._failure or "after an interrupted run")
            raise
        finally:
            self._in_call = False

    def _keep_logs(self):
        """Keeps every task's log past the teardown (see `workdir.keep_logs`); the path."""
        self._stop_watcher()  # Streams what is left first.
        return self._launcher.workdir.keep_logs()

    def _teardown(self, why):
        self._stop_watcher()
        self._launcher.stop(graceful=False)
        self._forget_tasks()
        self._failure = why

    def _fail(self, function, outcome, starts):
        """Dumps stacks, tears the tasks down and raises the error for a call of
        `function` ("module:qualname")."""
        evidence = calls.Evidence(self._launcher, function, outcome, starts)
        logs = self._keep_logs()
        self._teardown("after a fault")
        error, cause = evidence.error(deadlines.describe(self._timeout), logs)
        if evidence.port_clash:
            raise _PortClash(error)
        self._failure = f"after a fault ({str(error).splitlines()[0]})"
        raise error from cause


def local_cluster(num_workers=2, **options) -> LocalCluster:
    """A cluster of local processes that runs a function in every task (docs/clusters.md).

    Args:
        num_workers: "worker" tasks (1 to 64).
        has_chief: also a "chief" task, first in results.
        ps: "ps" tasks (0 to 64). Then every "worker" and "ps" task starts its
            tf.distribute.Server from TF_CONFIG before it is ready, as
            parameter-server training needs (coordinate with `run_on("chief", fn)`).
        evaluator: also an "evaluator" task, last, outside the cluster spec.
        devices_per_worker: virtual CPUs of each task (1 to 256), k replicas of
            MultiWorkerMirroredStrategy per task.
        timeout: seconds a `run` may take before it fails with every task's
            stack; it and start_timeout scale with $COMPAT_DISTRIBUTE_TIMEOUT_SCALE.
        env: environment for every task (str -> str), TF_CONFIG excepted.
        task_env: `(task_type, task_id) -> {str: str}`, a task's own environment,
            called once per task when the cluster is made.
        start_timeout: seconds the tasks may take to start; default max(timeout, 60).
        network: "private" (one network namespace of the cluster's own: the
            servers are reachable by its tasks alone; ClusterError where none
            can be made), "host" (this process's network: TensorFlow's servers
            listen on all interfaces) or "auto" ("private" where possible,
            else "host" with a RuntimeWarning).
        hooks: a `LaunchHooks` for tests that inject faults into launches.
        auto_restart: a task whose process ends non-zero, or whose call
            raises, starts again (same address and TF_CONFIG) and runs the call
            again, up to 3 times per call.
        chief_ends_job: the chief's end stops every task (with auto_restart,
            only its exit with status 0); `run` then raises ClusterError.
        stream_output: each task's output on this process's stdout as it
            comes, behind "[worker-1] ".

    Returns:
        A `LocalCluster`, not started: use it in a `with` statement, or call
        `start()`/`stop()`.
    """
    keywords = inspect.signature(LocalCluster).parameters.values()
    checks.known_options(options, [p.name for p in keywords if p.kind is p.KEYWORD_ONLY])
    return LocalCluster(num_workers, **options)
