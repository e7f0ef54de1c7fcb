"""The texts of a cluster's errors, from typed failures: which task is named first."""

import dataclasses

from compat_distribute.testing.cluster import ClusterTaskError
from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import report


@dataclasses.dataclass
class _Task:
    task_type: str
    task_id: int
    code: object = None
    alive: bool = True

    @property
    def name(self):
        return f"{self.task_type} {self.task_id}"

    def exitcode(self):
        return self.code


def test_a_stopped_task_is_named_before_the_peer_that_failed_waiting_for_it():
    worker_0, worker_1 = _Task("worker", 0), _Task("worker", 1)
    raised = protocol.Raised(3, "UnavailableError", "Collective ops is aborted.", "Traceback...\n")
    error = report.call_failure(
        "m:step",
        [worker_0, worker_1],
        [protocol.TaskRaised("worker 0", raised)],
        [worker_1],
        {"worker 0": "File m.py, line 3 in step"},
        {"worker 0": "zero says\n", "worker 1": ""},
        {"worker 1"},
    )
    assert isinstance(error, ClusterTaskError)
    assert (error.task_type, error.task_id, error.exitcode) == ("worker", 1, None)
    assert str(error) == (
        "local_cluster: worker 1 was stopped (SIGSTOP, SIGTSTP or a debugger) during "
        "run(m:step) and could not answer. The cluster was torn down.\n"
        "worker 0 also raised UnavailableError: Collective ops is aborted.\n"
        "Output of worker 1 during the call (last lines):\n    (nothing)\n"
        "Python stacks of worker 0:\n    File m.py, line 3 in step\n"
        "Python stacks of worker 1: none (stopped: SIGSTOP, SIGTSTP or a debugger)."
    )


def test_a_task_that_died_is_named_with_its_signal():
    worker_0, worker_1 = _Task("worker", 0), _Task("worker", 1, code=-9)
    error = report.call_failure(
        "m:step",
        [worker_0, worker_1],
        [protocol.TaskDied("worker 1", -9)],
        [worker_0],
        {"worker 0": "File m.py, line 3 in step"},
        {"worker 0": "", "worker 1": "one says\n"},
        set(),
    )
    assert (error.task_type, error.task_id, error.exitcode) == ("worker", 1, -9)
    assert str(error).splitlines()[:3] == [
        "local_cluster: worker 1 was killed by SIGKILL during run(m:step). The cluster was torn down.",
        "Still running when the call failed: worker 0.",
        "Output of worker 1 during the call (last lines):",
    ]
    assert error.output_tail == "one says"


def test_the_task_that_died_is_named_before_the_peer_that_raised_first():
    # Worker 0 saw its peer's death as UnavailableError before worker 1's end was seen.
    worker_0, worker_1 = _Task("worker", 0), _Task("worker", 1, code=-9)
    raised = protocol.Raised(3, "UnavailableError", "Collective ops is aborted.", "Traceback...\n")
    failures = [protocol.TaskRaised("worker 0", raised), protocol.TaskDied("worker 1", -9)]
    error = report.call_failure(
        "m:step",
        [worker_0, worker_1],
        report.causes_first(failures),
        [],
        {},
        {"worker 0": "", "worker 1": ""},
        set(),
    )
    assert (error.task_type, error.task_id, error.exitcode) == ("worker", 1, -9)
    assert str(error).splitlines()[:2] == [
        "local_cluster: worker 1 was killed by SIGKILL during run(m:step). The cluster was torn down.",
        "worker 0 also raised UnavailableError: Collective ops is aborted.",
    ]
    assert type(error) is ClusterTaskError  # A death has no exception class to mix in.
