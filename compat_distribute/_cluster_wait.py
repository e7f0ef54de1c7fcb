"""While `MultiWorkerMirroredStrategy()` waits for its cluster: a warning, a deadline (internal).

TensorFlow waits up to an hour, holding the GIL, for tasks that never start; a
watcher process names them and enforces $COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT.
"""

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from compat_distribute import _env
from compat_distribute._tf_config import TFConfig

__all__ = ["DEADLINE_ENV", "INTERRUPT_GRACE_S", "WARN_AFTER_S", "deadline", "main", "watching"]

# How long building the strategy may wait before the warning (tests lower it).
WARN_AFTER_S = 30.0
DEADLINE_ENV = "COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT"
# How long the watcher may take to end once the strategy is built.
_WATCHER_EXIT_S = 5.0
# How long a wait may go on after a Ctrl-C before the watcher ends it.
INTERRUPT_GRACE_S = 1.0
# Jobs whose tasks TensorFlow waits for (the coordinated jobs of its strategy).
_COORDINATED_JOBS = ("chief", "worker")
# How long the probe of one task's address may take.
_PROBE_TIMEOUT_S = 1.0
# The watcher's program: this package from the folder holding it, whatever the
# process's sys.path, PYTHONPATH and working directory (argv: that folder, the job).
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WATCHER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from compat_distribute._cluster_wait import main; sys.exit(main(sys.argv[2:]))"
)


def deadline(environ=None):
    """Seconds of `$COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT`, None where unset or blank."""
    return _env.read(DEADLINE_ENV, environ)


def from_resolver(resolver):
    """The cluster and task of a cluster resolver, as a `TFConfig` (None where the
    resolver names no cluster: TensorFlow then builds a one-worker strategy)."""
    cluster = resolver.cluster_spec().as_dict()
    if not cluster:
        return None
    return TFConfig(
        cluster={
            job: addresses if isinstance(addresses, dict) else tuple(addresses)
            for job, addresses in cluster.items()
        },
        task_type=resolver.task_type,
        task_id=resolver.task_id,
    )


def _indexed(addresses):
    # A ClusterSpec's sparse job is {index: address}.
    return addresses.items() if isinstance(addresses, dict) else enumerate(addresses)


def _peers(config: TFConfig):
    """[(name, "host:port")] of the tasks TensorFlow waits for, this one left out."""
    return [
        (f"{job} {index}", address)
        for job in _COORDINATED_JOBS
        for index, address in _indexed(config.cluster.get(job, ()))
        if (job, index) != (config.task_type, config.task_id)
    ]


def _answers(address):
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_TIMEOUT_S).close()
    except OSError:
        return False
    return True


# Where the cluster came from: how the text names it, the cluster, and a task's place in it.
SOURCES = {
    "TF_CONFIG": ("TF_CONFIG", "TF_CONFIG cluster", "its own TF_CONFIG['task']"),
    "cluster_resolver": (
        "its cluster_resolver",
        "cluster in its cluster_resolver",
        "its own task_type and task_id",
    ),
}


def _waiting_text(task, peers, waited_s, limit, source="TF_CONFIG"):
    where, cluster, place = SOURCES[source]
    silent = [f"{name} ({address})" for name, address in peers if not _answers(address)]
    if silent:
        what = (
            f"nothing listens yet at {', '.join(silent)}: start each task with the same "
            f"{cluster} and {place}, or correct the addresses"
        )
    else:
        what = (
            f"every other task's address answers ({', '.join(n for n, _ in peers)}), but not "
            f"all of them have joined: each must build MultiWorkerMirroredStrategy with the "
            f"same {cluster}"
        )
    if limit is None:
        deadline_text = (
            f"TensorFlow waits up to an hour and has no option to shorten that (its "
            f"CommunicationOptions(timeout_seconds=...) bounds collectives, not this wait); "
            f"set {DEADLINE_ENV}=SECONDS to end this process after that long"
        )
    else:
        deadline_text = f"{DEADLINE_ENV}={limit:g} ends this process at {limit:g} s"
    return (
        f"MultiWorkerMirroredStrategy() in task {task} has waited {waited_s:g} s for the "
        f"other tasks of its cluster ({where}): {what}. {deadline_text}."
    )


def _say(text):
    sys.stderr.write(f"compat_distribute: {text}\n")
    sys.stderr.flush()


class _Interrupted(Exception):
    """A Ctrl-C reached the waiting process."""


def _released_within(seconds, interrupts=None):
    """Whether this watcher's stdin closed (the strategy is built, or its
    process is gone) within `seconds` (None: however long that takes);
    raises `_Interrupted` when the process got SIGINT meanwhile (`interrupts`:
    the wakeup pipe's end, or None)."""
    watched = [sys.stdin] + ([interrupts] if interrupts is not None else [])
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        readable = select.select(watched, [], [], left)[0]
        if sys.stdin in readable:
            return True
        if not readable:
            return False
        said = os.read(interrupts, 64)
        if not said:  # Closed: the process no longer forwards its signals.
            watched.remove(interrupts)
        elif signal.SIGINT in said:
            raise _Interrupted


def _wait(parent, task, warn_after, limit, peers, source, interrupts):
    first = warn_after if limit is None else min(warn_after, limit)
    if _released_within(first, interrupts):
        return
    if limit is None or first < limit:
        _say(f"warning: {_waiting_text(task, peers, first, limit, source)}")
    if _released_within(None if limit is None else limit - first, interrupts):
        return
    text = _waiting_text(task, peers, limit, limit, source)
    if _released_within(0):  # the strategy came up while the peers were probed
        return
    _say(f"error: {text} Killing it now (SIGKILL).")
    os.kill(parent, signal.SIGKILL)


def main(argv):
    """The watcher (see the module): `main([JSON])`."""
    job = json.loads(argv[0])
    parent, task = job["parent"], job["task"]
    try:
        _wait(
            parent,
            task,
            job["warn_after"],
            job["limit"],
            [tuple(peer) for peer in job["peers"]],
            job["source"],
            job["interrupts"],
        )
    except _Interrupted:
        if _released_within(INTERRUPT_GRACE_S):
            return 0  # The strategy came up: Python raises KeyboardInterrupt itself.
        _say(
            f"error: MultiWorkerMirroredStrategy() in task {task} was interrupted (Ctrl-C) "
            f"while it waited for the other tasks of its cluster; TensorFlow does not return "
            f"to Python before they join, so the process is killed now (SIGKILL)."
        )
        os.kill(parent, signal.SIGKILL)
    return 0


def _forward_interrupts():
    """(read end, write end, the wakeup fd it replaced) of a pipe that Python's
    C-level handler writes each signal to, where SIGINT raises
    KeyboardInterrupt and this is the main thread; else None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None  # Ignored, or handled by the program: its business.
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    return read_end, write_end, signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)


@contextlib.contextmanager
def watching(config: TFConfig | None, limit=None, source="TF_CONFIG"):
    """Watches the block (TensorFlow building the strategy) for the cluster of
    `config` (None, or a cluster of one task: nothing to wait for); `limit`:
    seconds after which the process is killed, or None (see the module);
    `source`: where the cluster came from, a key of `SOURCES`."""
    if config is None or config.task_type not in _COORDINATED_JOBS or not _peers(config):
        yield
        return
    forward = _forward_interrupts()
    job = {
        "parent": os.getpid(),
        "task": f"{config.task_type} {config.task_id}",
        "warn_after": WARN_AFTER_S,
        "limit": limit,
        "peers": _peers(config),
        "source": source,
        "interrupts": None if forward is None else forward[0],
    }
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-c", _WATCHER, _PACKAGE_PARENT, json.dumps(job)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # the terminal's Ctrl-C reaches the process, not its deadline
            pass_fds=() if forward is None else forward[:1],
        )
    finally:
        if forward is not None:
            os.close(forward[0])  # The watcher has its own copy.
    try:
        yield
    finally:
        if forward is not None:
            signal.set_wakeup_fd(forward[2])
            os.close(forward[1])
        watcher.stdin.close()
        try:
            watcher.wait(_WATCHER_EXIT_S)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
