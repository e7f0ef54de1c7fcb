"""What the cluster and its tasks say to each other, as typed messages.

Internal: not part of the public API; the names below may change.

Messages travel pickled over one socket per task (a `multiprocessing`
connection):

    task -> cluster, at start-up:  Alive, then Ready or StartupFailed
    cluster -> task:               Call ..., Exit
    cluster -> relay:              Forward (then its sockets), Exit
    launcher -> zygote:            Fork (then the task's socket and log), Reap, Exit
    zygote -> launcher:            Ready or StartupFailed, then Forked or
                                   ForkRefused per Fork, Reaped per Reap, and
                                   Exited whenever a task it forked ends
    task -> cluster, per Call:     Result or Raised

Each message is pickled once by its sender (`dumps`) and sent as bytes: a
call goes to every task as the same bytes, and a result is pickled once, in
its `Result`. The arguments travel pickled inside the call (`payload`), so
that a task that cannot unpickle them still knows which call to answer.
Values that do not pickle or unpickle fail with a message naming the function,
never inside the connection.

Functions reach a task by reference (module, qualname), since a fresh process
imports them: `function_reference` checks that a task can.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import sys
import traceback

from compat_distribute import _validate

__all__ = [
    "Alive",
    "Call",
    "Exit",
    "Exited",
    "Fork",
    "ForkRefused",
    "Forked",
    "Forward",
    "Raised",
    "Ready",
    "Reap",
    "Reaped",
    "Result",
    "StartupFailed",
    "TaskDied",
    "TaskRaised",
    "dumps",
    "dumps_call",
    "dumps_result",
    "function_reference",
    "lookup",
]

# -- task -> cluster --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Alive:
    """The task's stack dump (SIGUSR1) is armed; it starts its main next."""

    pid: int


@dataclasses.dataclass(frozen=True)
class Ready:
    """The task's main has set up (imported TensorFlow, made its devices)."""

    pid: int


@dataclasses.dataclass(frozen=True)
class StartupFailed:
    traceback: str


@dataclasses.dataclass(frozen=True)
class Result:
    call_id: int
    value: object  # What the function returned.


@dataclasses.dataclass(frozen=True)
class Raised:
    """The function raised `type`: `message` in a task."""

    call_id: int
    type: str
    message: str
    traceback: str
    exception: bytes | None = None  # Pickled, when the exception pickles.

    @classmethod
    def from_exception(cls, call_id, e, hint=None):
        """`e` as raised in the task; `hint`: what the task knows of its cause, if anything."""
        try:
            exception = pickle.dumps(e)
            pickle.loads(exception)
        except Exception:  # pylint: disable=broad-except
            exception = None
        message = str(e) if hint is None else f"{str(e).rstrip()} (Hint: {hint})"
        return cls(
            call_id,
            type(e).__name__,
            message,
            "".join(traceback.format_exception(type(e), e, e.__traceback__)),
            exception,
        )

    def unpickled_exception(self):
        """The task's exception, to chain as `__cause__`, or None."""
        try:
            return None if self.exception is None else pickle.loads(self.exception)
        except Exception:  # pylint: disable=broad-except
            return None


# -- cluster -> task --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Call:
    call_id: int
    module: str
    qualname: str
    payload: bytes  # The pickled (args, kwargs).

    @property
    def function(self):
        return f"{self.module}:{self.qualname}"


@dataclasses.dataclass(frozen=True)
class Exit:
    pass


@dataclasses.dataclass(frozen=True)
class Forward:
    """Relay connections to `port` inside the private network out to this
    process's 127.0.0.1:`port`; `sockets` unconnected TCP sockets of this
    process's network follow on the connection (SCM_RIGHTS), one per connection."""

    port: int
    sockets: int


# -- launcher <-> zygote (see `zygote`) --------------------------------------


@dataclasses.dataclass(frozen=True)
class Fork:
    """Fork a task that runs `main(argv, conn)` with the environment `env`; its
    socket and its log file follow on the connection (SCM_RIGHTS)."""

    main: str
    argv: tuple
    env: dict


@dataclasses.dataclass(frozen=True)
class Forked:
    """The task runs as `pid`, in a session of its own."""

    pid: int


@dataclasses.dataclass(frozen=True)
class ForkRefused:
    """Forking this process would copy a state that must not be copied."""

    reason: str


@dataclasses.dataclass(frozen=True)
class Exited:
    """A task the zygote forked ended with `status` (negative: killed by that
    signal); it stays a zombie, so its pid and process group id stay taken,
    until `Reap`."""

    pid: int
    status: int


@dataclasses.dataclass(frozen=True)
class Reap:
    pid: int


@dataclasses.dataclass(frozen=True)
class Reaped:
    pid: int


# -- What went wrong in a call, as the cluster sees it -----------------------


@dataclasses.dataclass(frozen=True)
class TaskRaised:
    """A task answered a call with an exception (or an unreadable result)."""

    task: str  # "worker 1"
    raised: Raised


@dataclasses.dataclass(frozen=True)
class TaskDied:
    """A task's process ended during a call."""

    task: str
    exitcode: int | None  # None: still not reaped after the grace period.
    by: str = ""  # What ended it on purpose ("kill_task"), if anything.


# -- Functions by reference -------------------------------------------------


def lookup(obj, qualname):
    """The attribute of `obj` at dotted `qualname` (a function by reference)."""
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _lookup_or_none(obj, qualname):
    try:
        return lookup(obj, qualname)
    except AttributeError:
        return None


def function_reference(fn):
    """(module, qualname) that a fresh process can import `fn` by, or raises."""
    fix = (
        " Define fn with `def` at the top level of an importable module "
        "(a test module is fine) and pass any values it needs as args."
    )
    if not callable(fn):
        raise TypeError(f"fn must be a module-level function; got {_validate.show(fn)}.{fix}")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
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
        found = _lookup_or_none(main, qualname)
    else:
        mod = sys.modules.get(module)
        found = _lookup_or_none(mod, qualname) if mod is not None else None
    if found is not fn:
        raise ValueError(
            f"fn {_validate.show(fn)} is not reachable as {module}:{qualname} (was the "
            f"name rebound, or is it a method or a functools.partial?).{fix}"
        )
    return module, qualname


def dumps(message) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def dumps_call(call_id, module, qualname, args, kwargs) -> bytes:
    """A `Call`, pickled once for every task."""
    try:
        payload = dumps((args, kwargs))
    except Exception as e:  # pickle raises several types.
        raise TypeError(
            f"args and kwargs for {module}:{qualname} must pickle, to reach the "
            f"worker processes; pickling failed: {type(e).__name__}: {e}"
        ) from e
    return dumps(Call(call_id, module, qualname, payload))


def dumps_result(call, value) -> bytes:
    try:
        return dumps(Result(call.call_id, value))
    except Exception as e:  # pylint: disable=broad-except
        raise TypeError(
            f"the result of {call.function} does not pickle, so it cannot "
            f"reach the caller: {type(e).__name__}: {e}. Return plain Python or "
            f"NumPy values (call .numpy() on tensors)."
        ) from e
