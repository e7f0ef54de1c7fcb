"""The errors a local cluster raises to its caller."""

import functools

__all__ = ["ClusterError", "ClusterTaskError", "ClusterTimeoutError", "task_error_class"]


class ClusterError(RuntimeError):
    """A local cluster could not start, or was used after it was torn down."""


class ClusterTaskError(ClusterError):
    """A task raised, died, or failed to start.

    When the task raised an exception whose class this process can import,
    the error is also an instance of that class (see `task_error_class`), so
    `pytest.raises(ValueError)` catches a task's ValueError; the task's own
    exception is `__cause__`.

    Attributes:
        task_type, task_id: the task, e.g. "worker", 1.
        exitcode: the process's exit status when it died (negative: killed by
            that signal), None when the function raised.
        remote_traceback: the task's formatted traceback ("" when it died).
        output_tail: the last lines the task wrote to stdout/stderr.
        stacks: {"worker 0": Python stacks dumped when the call failed} for the
            tasks that were still alive then.
        logs: the directory where every task's log was kept, or None.
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
        logs=None,
    ):
        super().__init__(message)
        self.task_type = task_type
        self.task_id = task_id
        self.exitcode = exitcode
        self.remote_traceback = remote_traceback
        self.output_tail = output_tail
        self.stacks = dict(stacks or {})
        self.logs = logs

    # The message, whatever the task's exception class would make of it.
    __str__ = BaseException.__str__


@functools.lru_cache(maxsize=None)
def task_error_class(exception_type):
    """`ClusterTaskError` that is also an `exception_type` (an Exception
    class), or ClusterTaskError itself where the two cannot be one class (a
    built-in with a layout of its own, such as OSError)."""
    if not (isinstance(exception_type, type) and issubclass(exception_type, Exception)):
        return ClusterTaskError
    if issubclass(exception_type, ClusterTaskError):
        return exception_type
    name = f"ClusterTaskError[{exception_type.__qualname__}]"

    def __new__(cls, *args, **kwargs):  # The task's class lays the instance out (OSError's).
        del args, kwargs
        return exception_type.__new__(cls)

    try:
        mixed = type(name, (ClusterTaskError, exception_type), {"__qualname__": name, "__new__": __new__})
        mixed.__new__(mixed)  # A class of the task's own may not build so.
    except Exception:  # pylint: disable=broad-except
        return ClusterTaskError
    return mixed


class ClusterTimeoutError(ClusterError, TimeoutError):
    """A call or start-up did not finish within the cluster's timeout.

    Attributes:
        pending: names of the tasks that had not answered, e.g. ["worker 1"].
        stopped: the pending tasks that were stopped (SIGSTOP, a debugger):
            the likely cause, named first in the message.
        stacks: {"worker 0": Python stacks dumped at the timeout}.
        logs: the directory where every task's log was kept, or None.
    """

    def __init__(self, message, *, pending, stacks, stopped=(), logs=None):
        super().__init__(message)
        self.pending = list(pending)
        self.stopped = list(stopped)
        self.stacks = dict(stacks)
        self.logs = logs
