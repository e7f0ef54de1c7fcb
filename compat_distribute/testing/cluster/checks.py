"""Checks of `local_cluster`'s arguments: a clear error before anything starts.

Internal: not part of the public API; the names below may change.
"""

import difflib
import numbers
import signal

from compat_distribute import _validate
from compat_distribute._tf_config import parse_tf_config
from compat_distribute.testing import devices
from compat_distribute.testing.cluster.hooks import LaunchHooks

__all__ = [
    "MAX_WORKERS",
    "devices_per_worker",
    "env",
    "flag",
    "hooks",
    "known_options",
    "num_workers",
    "positive_seconds",
    "task_count",
    "task_env",
    "task_env_hook",
    "task_key",
    "task_selection",
    "task_signal",
]

# Each task is a process that imports TensorFlow (seconds of CPU, hundreds of
# MB): a count far past this on one machine is a typo, not a test.
MAX_WORKERS = 64


def known_options(options, accepted):
    """Refuses a keyword of `local_cluster(num_workers, **options)` not in `accepted`."""
    for name in options:
        if name not in accepted:
            close = difflib.get_close_matches(name, accepted, n=1)
            raise TypeError(
                f"local_cluster() got an unexpected keyword argument {name!r}"
                f"{f' (did you mean {close[0]!r}?)' if close else ''}. It takes num_workers and "
                f"{', '.join(accepted)}."
            )


def num_workers(value):
    n = _validate.positive_int("num_workers", value)
    if n > MAX_WORKERS:
        raise ValueError(
            f"num_workers must be at most {MAX_WORKERS} (each worker is a process that "
            f"imports TensorFlow); got {n}. Ask for the workers the test needs, e.g. "
            f"local_cluster(2)."
        )
    return n


def task_count(name, value):
    """A count of tasks that may be 0 (ps), at most MAX_WORKERS."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= 0; got {_validate.show(value)}.")
    if not 0 <= value <= MAX_WORKERS:
        raise ValueError(
            f"{name} must be an int in 0..{MAX_WORKERS} (each task is a process that imports "
            f"TensorFlow); got {value}."
        )
    return value


def devices_per_worker(value):
    return devices.check_count(
        "devices_per_worker",
        value,
        fix=" Ask for the virtual CPU devices one worker's strategy needs, e.g. 2.",
    )


def positive_seconds(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds; got {_validate.show(value)}.")
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(
            f"{name} must be a finite number of seconds > 0; got {_validate.show(value)}. "
            f"Every call needs a bound so that a hung task cannot hang the caller."
        )
    return float(value)


def env(env):
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise TypeError(f"env must be a dict of str -> str; got {_validate.show(env)}.")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                f"env must map str -> str; env[{key!r}] = {_validate.show(value)}. Convert "
                f"values with str()."
            )
    if "TF_CONFIG" in env:
        # Say what is wrong with it first, if anything: a malformed TF_CONFIG
        # usually means the caller meant to configure the cluster through it.
        parse_tf_config(env["TF_CONFIG"])
        raise ValueError(
            "env['TF_CONFIG'] is set, but local_cluster writes TF_CONFIG for each "
            "task itself (127.0.0.1 ports it picks). Remove it from env and use "
            "num_workers= and has_chief= to shape the cluster."
        )
    return dict(env)


def task_env_hook(value):
    if value is not None and not callable(value):
        raise TypeError(
            f"task_env must be None or a callable (task_type, task_id) -> dict of str -> str; "
            f"got {_validate.show(value)}."
        )
    return value


def task_env(hook, task_type, task_id):
    """What `hook` gives the task, checked as `env` is (naming the task)."""
    given = hook(task_type, task_id)
    try:
        return env(given)
    except (TypeError, ValueError) as e:
        raise type(e)(f"task_env({task_type!r}, {task_id}) returned {_validate.show(given)}: {e}") from None


def hooks(value):
    if value is None:
        return LaunchHooks()
    if not isinstance(value, LaunchHooks):
        raise TypeError(
            f"hooks must be None or a compat_distribute.testing.cluster.LaunchHooks; "
            f"got {_validate.show(value)}. Build one with LaunchHooks(pick_ports=..., "
            f"command=..., on_launch=...)."
        )
    return value


def flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {_validate.show(value)}.")
    return value


def _names(keys):
    return ", ".join(f"({t!r}, {i})" for t, i in keys)


def task_key(keys, task_type, task_id):
    """(task_type, task_id) when it names one of `keys`, else ValueError listing them."""
    if (task_type, task_id) not in keys or isinstance(task_id, bool):
        raise ValueError(
            f"task_type, task_id must name a task of this cluster; got {task_type!r}, "
            f"{_validate.show(task_id)}. Its tasks: {_names(keys)}."
        )
    return task_type, task_id


def task_selection(tasks, keys):
    """The `keys` that `tasks` names, in cluster order: a job name ("chief"),
    a (task_type, task_id) pair, or a list of those."""
    jobs = sorted({t for t, _ in keys})
    hint = (
        f'Name a job ({", ".join(repr(j) for j in jobs)}), a task as a (task_type, '
        f"task_id) pair such as {keys[0]!r}, or a list of those."
    )
    items = list(tasks) if isinstance(tasks, list) else [tasks]
    chosen = set()
    for item in items:
        if isinstance(item, str) and item in jobs:
            chosen.update(k for k in keys if k[0] == item)
        elif isinstance(item, tuple) and item in keys and not isinstance(item[1], bool):
            chosen.add(item)
        else:
            raise ValueError(f"tasks: {_validate.show(item)} is no job or task of this cluster. {hint}")
    if not chosen:
        raise ValueError(f"tasks must name at least one task; got {_validate.show(tasks)}. {hint}")
    return [k for k in keys if k in chosen]


# Signals that do not end a task: they stop it, are ignored, or dump its stacks.
_NOT_ENDING = {
    signal.SIGSTOP,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGCONT,
    signal.SIGCHLD,
    signal.SIGURG,
    signal.SIGWINCH,
    signal.SIGUSR1,
}


def task_signal(value):
    """A signal that ends a process (`signal.Signals`), else a clear error."""
    try:
        sig = signal.Signals(value)
    except (ValueError, TypeError):
        sig = None
    if sig is None or isinstance(value, bool) or sig in _NOT_ENDING:
        raise ValueError(
            f"sig must be a signal that ends a process, such as signal.SIGKILL (the default) or "
            f"signal.SIGTERM; got {_validate.show(value)}. To stop a task without ending it, "
            f"send SIGSTOP to its pid yourself."
        )
    return sig
