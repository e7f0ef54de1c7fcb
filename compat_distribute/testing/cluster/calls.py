"""One call of `LocalCluster.run`: send it, collect the answers, deal with the tasks that end (internal).

`collect` sends the pickled call to the target tasks and waits for each
answer, within the cluster's timeout. Meanwhile it watches every task of the
cluster, targets or not, answered or not: a task whose process ends goes to
the cluster's `on_death` policy, which restarts it (auto_restart), keeps it
down (it was killed on purpose), ends the job (chief_ends_job), or calls it a
fault. Restarts wait `RESTART_SETTLE_S` for the tasks that end together, then
start them in task order; a restarted target gets the call again. After the first fault the
other targets get `FAILURE_GRACE_S` to answer, since collectives wait for
every task; then the call fails with the task that died first named first.
A Ctrl-C always ends the call (`_CtrlC`).
"""

from __future__ import annotations

import collections
import pickle
import signal
import threading
import time
from multiprocessing import connection as mp_connection

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import launcher as launcher_lib
from compat_distribute.testing.cluster import ports
from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import report

__all__ = ["Evidence", "FAILURE_GRACE_S", "MAX_RESTARTS", "Outcome", "RESTART_SETTLE_S", "collect"]

# After one task fails, how long the others get to finish before they are
# presumed blocked on the failed peer (collectives wait for every task).
FAILURE_GRACE_S = 1.0
# How often a call looks whether a task it is not waiting on has ended.
_WATCH_S = 0.1
# Restarts of one task within one call (auto_restart), past which its failure stands.
MAX_RESTARTS = 3
# How long restarts wait for the other tasks that end with the first (a checkpoint
# handler's exit, a collective that fails): then all start again, the chief and
# worker 0 (the coordination service's leader) first.
RESTART_SETTLE_S = 1.0


class Outcome:
    """What a call came to: {task name: result}, [TaskRaised | TaskDied, ...]
    (the order seen), the targets that did not answer, the tasks whose
    processes ended meanwhile, and why the job ended (chief_ends_job) or None."""

    def __init__(self):
        self.results = {}
        self.failures = []
        self.pending = []
        self.gone = []
        self.job_ended = None


def collect(cluster, targets, call_bytes, call_id, timeout):
    """Runs one call on `targets` (tasks of `cluster`'s launcher); returns its `Outcome`.

    `cluster` provides `tasks()` (every live task, in task order), `on_death(task,
    code, may_restart)` -> "restart", "down", "ended" or "fault", `restart(task,
    why)` -> the new task, `may_restart_after_raise()` and `job_ended`.
    """
    with _CtrlC() as ctrl_c:
        return _collect(_Call(cluster, targets, call_bytes, call_id), timeout, ctrl_c)


def _collect(call, timeout, ctrl_c):
    deadline = time.monotonic() + deadlines.scaled(timeout)
    while call.pending or call.queued:
        ctrl_c.check()
        remaining = deadline - time.monotonic()
        if call.failed_at is not None:
            remaining = min(remaining, call.failed_at + FAILURE_GRACE_S - time.monotonic())
        if remaining <= 0:
            break
        wait = min(remaining, _WATCH_S)
        for conn in mp_connection.wait([t.conn for t in call.pending], wait) if call.pending else []:
            call.receive(next(t for t in call.pending if t.conn is conn))
        if call.queued and not call.pending:
            time.sleep(min(wait, 0.01))  # Only restarts are due.
        call.notice_deaths()
        call.restart_due()
    ctrl_c.check()
    call.outcome.pending = call.pending + [task for task, _, _ in call.queued]
    return call.outcome


class _CtrlC:
    """While a call runs in the main thread under Python's own SIGINT handler:
    a SIGINT raises KeyboardInterrupt, as ever, and is also remembered, and
    `check` raises it again. Python runs a signal's handler in whatever code
    the main thread runs at that moment; where that is a finalizer (a
    `__del__`, a weakref or gc callback), the KeyboardInterrupt is printed as
    "Exception ignored" and dropped, and the call would go on to its timeout."""

    def __init__(self):
        self.pressed = False
        self._replaced = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                self._replaced = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc_info):
        if self._replaced is not None:
            signal.signal(signal.SIGINT, self._replaced)

    def _on_sigint(self, signum, frame):
        self.pressed = True
        signal.default_int_handler(signum, frame)

    def check(self):
        if self.pressed:
            raise KeyboardInterrupt


class _Call:
    """The state of one call: the targets it waits on, and the tasks to restart."""

    def __init__(self, cluster, targets, call_bytes, call_id):
        self.cluster = cluster
        self.call_bytes = call_bytes
        self.call_id = call_id
        self.outcome = Outcome()
        self.restarts = collections.Counter()
        self.pending = list(targets)
        self.answering = {task.name for task in targets}  # The targets, by name.
        # (task, why, since): ended or raised, to start again once the others
        # that end with it have (`RESTART_SETTLE_S`), in task order.
        self.queued = []
        self.failed_at = None  # When the first failure was recorded.
        for task in self.pending:
            _send(task, call_bytes)  # A task that ended shows as its connection's end.

    def receive(self, task):
        self.pending.remove(task)
        answer = _receive(task, self.call_id)
        if isinstance(answer, protocol.TaskRaised):
            may = self.cluster.may_restart_after_raise() and self._may_restart(task)
            if may:
                self._queue(task, f"raised {answer.raised.type}")
            else:
                self._fail(answer)
        elif isinstance(answer, protocol.TaskDied):
            self._ended(task, answer.exitcode)
        else:
            self.outcome.results[task.name] = answer

    def notice_deaths(self):
        """Tasks this call does not wait on: non-targets, and targets that answered."""
        for task in self.cluster.tasks():
            if task in self.pending or task in self.outcome.gone or self._is_queued(task):
                continue
            if task.has_exited():
                self._ended(task, task.wait(0.5))

    def restart_due(self):
        if not self.queued:
            return
        settled = time.monotonic() - self.queued[0][2] >= RESTART_SETTLE_S
        if not settled and self.pending:
            return
        order = {task.name: i for i, task in enumerate(self.cluster.tasks())}
        queued, self.queued = self.queued, []
        for task, why, _ in sorted(queued, key=lambda q: order.get(q[0].name, len(order))):
            self.restarts[task.name] += 1
            new = self.cluster.restart(task, why)
            if task.name in self.answering and task.name not in self.outcome.results:
                _send(new, self.call_bytes)
                self.pending.append(new)

    def _ended(self, task, code):
        self.outcome.gone.append(task)
        verdict = self.cluster.on_death(task, code, self._may_restart(task))
        if verdict == "restart":
            self._queue(task, report.exit_reason(code))
        elif verdict == "ended":
            self.outcome.job_ended = self.cluster.job_ended
            self._mark_failed()
        elif verdict == "down":
            if task.name in self.answering and task.name not in self.outcome.results:
                self._fail(protocol.TaskDied(task.name, code, "kill_task"))
        else:
            self._fail(protocol.TaskDied(task.name, code))

    def _may_restart(self, task):
        return self.restarts[task.name] < MAX_RESTARTS

    def _queue(self, task, why):
        self.queued.append((task, why, time.monotonic()))

    def _is_queued(self, task):
        return any(task is queued for queued, _, _ in self.queued)

    def _fail(self, failure):
        self.outcome.failures.append(failure)
        self._mark_failed()

    def _mark_failed(self):
        if self.failed_at is None:
            self.failed_at = time.monotonic()


def _send(task, call_bytes):
    """Sends the call; a task that ended cannot take it, and its connection's
    end (EOF) says so to the caller's wait."""
    try:
        task.conn.send_bytes(call_bytes)
    except OSError:
        pass


def _receive(task, call_id):
    """The task's result, or its failure (TaskRaised, TaskDied)."""
    try:
        data = task.conn.recv_bytes()
    except (EOFError, OSError):
        return protocol.TaskDied(task.name, task.wait(2.0))
    try:
        answer = pickle.loads(data)
    except Exception as e:  # pylint: disable=broad-except
        why = f"unpickling the result of {task.name} here failed: {type(e).__name__}: {e}\n"
        return protocol.TaskRaised(task.name, protocol.Raised(call_id, type(e).__name__, str(e), why))
    if answer.call_id != call_id:
        raise AssertionError(f"{task.name} answered call {answer.call_id}, not {call_id}")
    if isinstance(answer, protocol.Raised):
        return protocol.TaskRaised(task.name, answer)
    return answer.value


class Evidence:
    """What a failed call leaves to say, taken before its tasks are torn down:
    each task's output during the call, stacks, which are stopped, and whether
    the zygote died (then it is the one to name)."""

    def __init__(self, launcher, function, outcome, starts):
        self.function = function
        tasks = list(launcher.tasks)
        self.failures = report.causes_first(outcome.failures)
        failed = {f.task for f in self.failures}
        self.pending = [t for t in outcome.pending if t.name not in failed]
        self.tasks = tasks + [t for t in outcome.pending + outcome.gone if t not in tasks]
        self.outputs = {t.name: t.output(starts.get(t.name, t.output_start)) for t in self.tasks}
        self.stacks = launcher_lib.dump_stacks(tasks)
        # Read before the teardown: a killed task is no longer stopped.
        self.stopped = {t.name for t in tasks if t.stopped()}
        self.zygote_died = launcher.zygote_failure(f"during run({function})")

    @property
    def port_clash(self):
        """Whether a server could not bind its port: TF's log says so or (when
        TF_CPP_MIN_LOG_LEVEL hides it) the exception a task raised."""
        texts = list(self.outputs.values()) + [
            f"{f.raised.message}\n{f.raised.traceback}"
            for f in self.failures
            if isinstance(f, protocol.TaskRaised)
        ]
        return any(ports.mentions_port_clash(text) for text in texts)

    def error(self, limit, logs):
        """(the error to raise, its cause: the task's exception or None);
        `limit`: the timeout in words; `logs`: where the logs were kept."""
        if self.zygote_died is not None:
            return report.with_logs(self.zygote_died, logs), None
        if not self.failures:
            error = report.call_timeout(
                self.function, limit, self.tasks, self.pending, self.stacks,
                self.outputs, self.stopped, logs,
            )
            return error, None
        first = self.failures[0]
        cause = None
        if isinstance(first, protocol.TaskRaised) and not self.stopped:
            cause = first.raised.unpickled_exception()
        error = report.call_failure(
            self.function, self.tasks, self.failures, self.pending, self.stacks,
            self.outputs, self.stopped, cause, logs,
        )
        return error, cause
