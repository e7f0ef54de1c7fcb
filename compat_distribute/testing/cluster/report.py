"""The texts of a cluster's errors: which task, what happened, its output and stacks.

Internal: not part of the public API; the names below may change.

A task here is anything with `.name`, `.task_type`, `.task_id`, `.alive` and
`.exitcode()` (see `task.Task`); `stopped` holds the names of the tasks that
were stopped (SIGSTOP, a debugger) when the call failed.
"""

import signal

from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster.errors import ClusterError
from compat_distribute.testing.cluster.errors import ClusterTaskError
from compat_distribute.testing.cluster.errors import ClusterTimeoutError
from compat_distribute.testing.cluster.errors import task_error_class

__all__ = [
    "SIGTERM_EXIT_CODE",
    "TAIL_LINES",
    "call_failure",
    "call_timeout",
    "causes_first",
    "died_between_runs",
    "exit_reason",
    "format_outputs",
    "format_stacks",
    "indent",
    "start_died",
    "start_failed",
    "start_timeout",
    "tail",
    "with_logs",
    "zygote_died",
    "zygote_failed",
    "zygote_refused",
    "zygote_timeout",
]

# Lines of a task's output quoted in errors.
TAIL_LINES = 40
# What a task exits with when it ends on SIGTERM (the shell's 128 + signal).
SIGTERM_EXIT_CODE = 128 + signal.SIGTERM


def tail(text, lines=TAIL_LINES):
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def indent(text):
    return "\n".join("    " + line for line in text.splitlines()) or "    (nothing)"


def exit_reason(code):
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    if code == SIGTERM_EXIT_CODE:
        return f"ended on SIGTERM (exit code {code})"
    return f"exited with code {code}"


def _state(task, stopped, *, start=False):
    if task.name in stopped:
        return "stopped: SIGSTOP, SIGTSTP or a debugger"
    code = task.exitcode()
    if start and not task.alive and code is None:
        return "never said hello"
    return exit_reason(code)


def _died(failure):
    return exit_reason(failure.exitcode) + (f" ({failure.by})" if failure.by else "")


def _failure_summary(failure):
    if isinstance(failure, protocol.TaskDied):
        return _died(failure)
    # The texts end in a full stop of their own.
    return f"raised {failure.raised.type}: {failure.raised.message.rstrip('.')}"


# TensorFlow's collectives, when a peer is a new process at the same address;
# TensorFlow then advises "Restart your program", which here means the tasks.
_NEW_INCARNATION = "different incarnation"


def _restart_hint(failures):
    if not any(
        isinstance(f, protocol.TaskRaised) and _NEW_INCARNATION in f.raised.message for f in failures
    ):
        return ""
    return (
        "\nA task was started again (start_task, or auto_restart) while its peers ran on: "
        "TensorFlow's collectives refuse it until every task starts again. Call stop() and "
        "start() (with auto_restart=True, each task whose call raises is started again)."
    )


def format_outputs(outputs, tasks):
    return "".join(
        f"\nOutput of {t.name} during the call (last lines):\n{indent(tail(outputs[t.name]))}"
        for t in tasks
    )


def format_stacks(stacks, tasks, stopped, *, start=False):
    parts = []
    for t in tasks:
        if t.name in stacks:
            parts.append(f"\nPython stacks of {t.name}:\n{indent(stacks[t.name])}")
        else:
            parts.append(f"\nPython stacks of {t.name}: none ({_state(t, stopped, start=start)}).")
    return "".join(parts)


def _stopped_first(pending, stopped):
    """The stopped tasks (the likely cause: the others wait for them), then the rest."""
    first = [t for t in pending if t.name in stopped]
    return first, first + [t for t in pending if t not in first]


def _stopped_clause(stopped):
    if not stopped:
        return ""
    names = ", ".join(t.name for t in stopped)
    verb = "is" if len(stopped) == 1 else "are"
    return f"{names} {verb} stopped (SIGSTOP, SIGTSTP or a debugger) and cannot answer; "


def _kept(logs):
    return f"\nEvery task's log is kept in {logs}" if logs else ""


def with_logs(error, logs):
    """`error` (a zygote's, say), saying where the logs were kept."""
    error.args = (f"{error.args[0]}{_kept(logs)}", *error.args[1:])
    error.logs = logs
    return error


def call_timeout(call, limit, tasks, pending, stacks, outputs, stopped, logs=None):
    """`limit`: the deadline as `deadlines.describe` words it ("6 s"); `logs`:
    where the logs were kept, or None."""
    stopped_tasks, pending = _stopped_first(pending, stopped)
    names = ", ".join(t.name for t in pending)
    return ClusterTimeoutError(
        f"local_cluster: run({call}) did not finish within {limit} (timeout); "
        f"{_stopped_clause(stopped_tasks)}still running: {names}. The cluster was torn down."
        f"{format_outputs(outputs, pending)}"
        f"{format_stacks(stacks, tasks, stopped)}{_kept(logs)}",
        pending=[t.name for t in pending],
        stopped=[t.name for t in stopped_tasks],
        stacks=stacks,
        logs=logs,
    )


def causes_first(failures):
    """`failures` with the tasks that died first (in the order seen), then
    those that raised: a peer's error (UnavailableError, say) is the symptom
    of a task that died."""
    return [f for f in failures if isinstance(f, protocol.TaskDied)] + [
        f for f in failures if not isinstance(f, protocol.TaskDied)
    ]


def call_failure(call, tasks, failures, pending, stacks, outputs, stopped, cause=None, logs=None):
    """The ClusterTaskError for `failures` (typed, the cause first, see
    `causes_first`) in a call; `cause`: the first task's own exception, whose
    class the error also is (`errors.task_error_class`) and whose attributes
    it keeps; `logs`: where the logs were kept, or None.

    A stopped task is named first: the others fail or wait because of it.
    """
    stopped_tasks, pending = _stopped_first(pending, stopped)
    first = failures[0]
    if stopped_tasks:
        task = stopped_tasks[0]
        headline = (
            f"{task.name} was stopped (SIGSTOP, SIGTSTP or a debugger) during run({call}) "
            f"and could not answer"
        )
        exitcode, remote_tb, detail = None, "", ""
        failures = [None] + list(failures)
    elif isinstance(first, protocol.TaskDied):
        task = next(t for t in tasks if t.name == first.task)
        headline = f"{task.name} {_died(first)} during run({call})"
        exitcode, remote_tb, detail = first.exitcode, "", ""
    else:
        task = next(t for t in tasks if t.name == first.task)
        headline = f"{task.name} {_failure_summary(first)}"
        exitcode, remote_tb = None, first.raised.traceback
        detail = f"\nTraceback in {task.name}:\n{indent(remote_tb)}"
    others = "".join(f"\n{f.task} also {_failure_summary(f)}." for f in failures[1:])
    rest = [t for t in pending if t is not task]
    if rest:
        others += f"\nStill running when the call failed: {', '.join(t.name for t in rest)}."
    quiet = isinstance(first, protocol.TaskRaised) and not pending
    error_class = ClusterTaskError
    if cause is not None and not stopped_tasks and isinstance(first, protocol.TaskRaised):
        error_class = task_error_class(type(cause))
    error = error_class.__new__(error_class)
    if error_class is not ClusterTaskError:
        error.__dict__.update(vars(cause))  # The task's exception's own attributes.
    ClusterTaskError.__init__(
        error,
        f"local_cluster: {headline}. The cluster was torn down.{_restart_hint(failures)}{others}{detail}"
        f"{format_outputs(outputs, [task] + rest)}"
        f"{'' if quiet else format_stacks(stacks, tasks, stopped)}{_kept(logs)}",
        task_type=task.task_type,
        task_id=task.task_id,
        exitcode=exitcode,
        remote_traceback=remote_tb,
        output_tail=tail(outputs[task.name]),
        stacks=stacks,
        logs=logs,
    )
    return error


def torn_down(why):
    return ClusterError(
        f"this local_cluster was torn down {why}; call start() to launch fresh tasks, or "
        f"create a new cluster."
    )


def not_running():
    return ClusterError(
        "this local_cluster is not running: use `with local_cluster(...) as cluster:` or call "
        "cluster.start() before run()."
    )


def needs_tasks_down(call, why_down, first_key):
    """`why_down`: {task name: why it does not run}, for a run of `call` that needs them."""
    names = ", ".join(f"{name} ({why})" for name, why in why_down.items())
    return ClusterError(
        f"local_cluster: run({call}) needs {names}, which does not run. Call "
        f"start_task{first_key!r} (or start()) first, or run_on the tasks that run."
    )


def died_between_runs(name, key, pid, code, call, output, logs):
    """The error for a task whose process ended after the last run, noticed before `call`."""
    return ClusterTaskError(
        f"local_cluster: {name} (pid {pid}) {exit_reason(code)} after the last run, so "
        f"run({call}) could not start. The cluster was torn down.\n"
        f"Output of {name} (last lines):\n{indent(tail(output))}{_kept(logs)}",
        task_type=key[0],
        task_id=key[1],
        exitcode=code,
        output_tail=tail(output),
        logs=logs,
    )


def start_timeout(limit, tasks, waiting, stacks, stopped):
    """`limit`: the deadline as `deadlines.describe` words it ("120 s")."""
    stopped_tasks, waiting = _stopped_first(waiting, stopped)
    names = ", ".join(t.name for t in waiting)
    return ClusterTimeoutError(
        f"local_cluster: {names} did not start within {limit} (start_timeout); "
        f"{_stopped_clause(stopped_tasks)}the other tasks would wait for them forever, so "
        f"the cluster was torn down.{format_stacks(stacks, tasks, stopped, start=True)}",
        pending=[t.name for t in waiting],
        stopped=[t.name for t in stopped_tasks],
        stacks=stacks,
    )


def start_died(task, code):
    return ClusterTaskError(
        f"local_cluster: {task.name} {exit_reason(code)} during start-up, before it was ready.\n"
        f"Output of {task.name} (last lines):\n{indent(tail(task.output()))}",
        task_type=task.task_type,
        task_id=task.task_id,
        exitcode=code,
        output_tail=tail(task.output()),
    )


def start_failed(task, remote_traceback):
    return ClusterTaskError(
        f"local_cluster: {task.name} failed during start-up:\n{indent(remote_traceback)}",
        task_type=task.task_type,
        task_id=task.task_id,
        remote_traceback=remote_traceback,
        output_tail=tail(task.output()),
    )


# -- The zygote (see `zygote`): no task, so no task_type; named as what it is.

ZYGOTE_OFF_HINT = (
    "Set COMPAT_DISTRIBUTE_ZYGOTE=0 to start each task as a fresh process instead."
)


def _zygote(zygote):
    return f"the zygote (pid {zygote.pid}, which imports TensorFlow once and forks the tasks)"


def zygote_died(zygote, code, when):
    """`when`: "during start-up", "while forking worker 1"..."""
    return ClusterError(
        f"local_cluster: {_zygote(zygote)} {exit_reason(code)} {when}; the tasks it forked "
        f"die with it. {ZYGOTE_OFF_HINT}\n"
        f"Output of the zygote (last lines):\n{indent(tail(zygote.output()))}"
    )


def zygote_failed(zygote, remote_traceback):
    return ClusterError(
        f"local_cluster: {_zygote(zygote)} failed during start-up:\n{indent(remote_traceback)}"
    )


def zygote_refused(zygote, name, reason):
    return ClusterError(
        f"local_cluster: {_zygote(zygote)} refused to fork {name}: {reason}. Keep TensorFlow "
        f"uninitialised at the import of the tasks' main modules (no op, no context). "
        f"{ZYGOTE_OFF_HINT}"
    )


def zygote_timeout(zygote, limit, stack):
    return ClusterTimeoutError(
        f"local_cluster: {_zygote(zygote)} did not start within {limit} (start_timeout), "
        f"so no task was started.\nPython stacks of the zygote:\n{indent(stack)}",
        pending=[],
        stacks={},
    )
