"""One call of `LocalCluster.run`: send it, collect the answers, deal with the tasks that end (internal).

`collect` sends the pickled call to the target tasks and waits for each
answer, within the cluster's timeout. Meanwhile it watches every task of the
cluster, targets or not, answered or not: a task whose process ends goes to
the cluster's `on_death` policy, which restarts it (auto_restart: the call is
sent again to a restarted target), keeps it down (it was killed on purpose),
ends the job (chief_ends_job), or calls it a fault. After the first fault the
other targets get `FAILURE_GRACE_S` to answer, since collectives wait for
every task; then the call fails with the task that died first named first.
"""

from __future__ import annotations

import collections
import pickle
import time
from multiprocessing import connection as mp_connection

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import protocol

__all__ = ["FAILURE_GRACE_S", "MAX_RESTARTS", "Outcome", "collect"]

# After one task fails, how long the others get to finish before they are
# presumed blocked on the failed peer (collectives wait for every task).
FAILURE_GRACE_S = 1.0
# How often a call looks whether a task it is not waiting on has ended.
_WATCH_S = 0.1
# Restarts of one task within one call (auto_restart), past which its failure stands.
MAX_RESTARTS = 3


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

    `cluster` provides `tasks()` (every live task), `on_death(task, code,
    may_restart)` -> the restarted task, "down", "ended" or "fault",
    `restart(task)`, `may_restart_after_raise()` and `job_ended`.
    """
    outcome = Outcome()
    restarts = collections.Counter()
    pending = list(targets)
    for task in pending:
        _send(task, call_bytes)  # A task that ended shows below, as its connection's end.
    deadline = time.monotonic() + deadlines.scaled(timeout)
    first_failure_at = None
    while pending:
        remaining = deadline - time.monotonic()
        if outcome.failures or outcome.job_ended:
            remaining = min(remaining, first_failure_at + FAILURE_GRACE_S - time.monotonic())
        if remaining <= 0:
            break
        for conn in mp_connection.wait([t.conn for t in pending], min(remaining, _WATCH_S)):
            task = next(t for t in pending if t.conn is conn)
            pending.remove(task)
            answer = _receive(task, call_id)
            if not isinstance(answer, (protocol.TaskRaised, protocol.TaskDied)):
                outcome.results[task.name] = answer
                continue
            again = _after_failure(cluster, task, answer, restarts, outcome)
            if again is not None:
                _send(again, call_bytes)
                pending.append(again)
            elif outcome.failures or outcome.job_ended:
                first_failure_at = first_failure_at or time.monotonic()
        # Tasks this call does not wait on: non-targets, and targets that answered.
        for task in list(cluster.tasks()):
            if task not in pending and task not in outcome.gone and task.has_exited():
                code = task.wait(0.5)
                outcome.gone.append(task)
                verdict = cluster.on_death(task, code, restarts[task.name] < MAX_RESTARTS)
                if not isinstance(verdict, str):
                    restarts[task.name] += 1
                elif verdict == "fault":
                    outcome.failures.append(protocol.TaskDied(task.name, code))
                elif verdict == "ended":
                    outcome.job_ended = cluster.job_ended
                if outcome.failures or outcome.job_ended:
                    first_failure_at = first_failure_at or time.monotonic()
    outcome.pending = pending
    return outcome


def _after_failure(cluster, task, failure, restarts, outcome):
    """Deals with a target that raised or ended; returns the restarted task
    to send the call to again, or None (the failure is recorded)."""
    may_restart = restarts[task.name] < MAX_RESTARTS
    if isinstance(failure, protocol.TaskRaised):
        if cluster.may_restart_after_raise() and may_restart:
            restarts[task.name] += 1
            return cluster.restart(task)
        outcome.failures.append(failure)
        return None
    outcome.gone.append(task)
    verdict = cluster.on_death(task, failure.exitcode, may_restart)
    if not isinstance(verdict, str):
        restarts[task.name] += 1
        return verdict  # Restarted: answers again.
    if verdict == "ended":
        outcome.job_ended = cluster.job_ended
    elif verdict == "down":
        outcome.failures.append(protocol.TaskDied(task.name, failure.exitcode, "kill_task"))
    else:
        outcome.failures.append(failure)
    return None


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
