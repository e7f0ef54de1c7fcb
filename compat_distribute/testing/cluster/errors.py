"""The errors a local cluster raises to its caller."""

__all__ = ["ClusterError", "ClusterTaskError", "ClusterTimeoutError"]


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
        stopped: the pending tasks that were stopped (SIGSTOP, a debugger):
            the likely cause, named first in the message.
        stacks: {"worker 0": Python stacks dumped at the timeout}.
    """

    def __init__(self, message, *, pending, stacks, stopped=()):
        super().__init__(message)
        self.pending = list(pending)
        self.stopped = list(stopped)
        self.stacks = dict(stacks)
