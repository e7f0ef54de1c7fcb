"""While `MultiWorkerMirroredStrategy()` waits for its cluster: a warning, a deadline (internal).

TensorFlow 2.21 builds a multi-worker strategy only once every chief and
worker task of the cluster has connected to the coordination service of the
first of them. It waits up to an hour for that (the service's device
propagation barrier) and says so only in INFO logs. No option of TF 2.21
shortens that wait: `CommunicationOptions(timeout_seconds=...)` bounds
collectives once the cluster is up, and the coordination service's register
timeout does not cover this barrier (both tried on TF 2.21: each still waited).

TensorFlow holds the interpreter (the GIL) while it waits, so no thread of the
process can speak: a small watcher process does, started by `watching` with
`python -m` this module and ended when the strategy is built. After
`WARN_AFTER_S` it writes a warning to stderr naming each task whose address
accepts no connection yet (a task that has not started), and how to set a
deadline: `$COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT` seconds, after which it
writes why and kills the process (SIGKILL: nothing gentler reaches it while
TensorFlow waits). Imports no TensorFlow.
"""

import contextlib
import json
import math
import os
import select
import signal
import socket
import subprocess
import sys

from compat_distribute._tf_config import TFConfig

__all__ = ["DEADLINE_ENV", "WARN_AFTER_S", "deadline", "main", "watching"]

# How long building the strategy may wait before the warning (tests lower it).
WARN_AFTER_S = 30.0
DEADLINE_ENV = "COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT"
# How long the watcher may take to end once the strategy is built.
_WATCHER_EXIT_S = 5.0
# Jobs whose tasks TensorFlow waits for (the coordinated jobs of its strategy).
_COORDINATED_JOBS = ("chief", "worker")
# How long the probe of one task's address may take.
_PROBE_TIMEOUT_S = 1.0
# A day: a deadline past this is a typo.
_MAX_DEADLINE_S = 86_400.0


def deadline(environ=None):
    """Seconds of `$COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT`, None where unset or blank."""
    text = (os.environ if environ is None else environ).get(DEADLINE_ENV, "")
    if not text.strip():
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= _MAX_DEADLINE_S:
        raise ValueError(
            f"{DEADLINE_ENV} must be a number of seconds > 0 and at most {_MAX_DEADLINE_S:g}: "
            f"how long MultiWorkerMirroredStrategy() may wait for the other tasks of its "
            f"cluster; got {text!r}. Set it so (e.g. 600), or unset it to wait as long as "
            f"TensorFlow does (an hour)."
        )
    return seconds


def _peers(config: TFConfig):
    """[(name, "host:port")] of the tasks TensorFlow waits for, this one left out."""
    return [
        (f"{job} {index}", address)
        for job in _COORDINATED_JOBS
        for index, address in enumerate(config.cluster.get(job, ()))
        if (job, index) != (config.task_type, config.task_id)
    ]


def _answers(address):
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_TIMEOUT_S).close()
    except OSError:
        return False
    return True


def _waiting_text(task, peers, waited_s, limit):
    silent = [f"{name} ({address})" for name, address in peers if not _answers(address)]
    if silent:
        what = (
            f"nothing listens yet at {', '.join(silent)}: start each task with the same "
            f"TF_CONFIG cluster and its own TF_CONFIG['task'], or correct the addresses"
        )
    else:
        what = (
            f"every other task's address answers ({', '.join(n for n, _ in peers)}), but not "
            f"all of them have joined: each must build MultiWorkerMirroredStrategy with the "
            f"same TF_CONFIG cluster"
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
        f"other tasks of its cluster (TF_CONFIG): {what}. {deadline_text}."
    )


def _say(text):
    sys.stderr.write(f"compat_distribute: {text}\n")
    sys.stderr.flush()


def _released_within(seconds):
    """Whether this watcher's stdin closed (the strategy is built, or its
    process is gone) within `seconds`; None waits for that alone."""
    return bool(select.select([sys.stdin], [], [], seconds)[0])


def main(argv):
    """The watcher (see the module): `python -m compat_distribute._cluster_wait JSON`."""
    job = json.loads(argv[0])
    parent, task, warn_after, limit = job["parent"], job["task"], job["warn_after"], job["limit"]
    peers = [tuple(peer) for peer in job["peers"]]
    first = warn_after if limit is None else min(warn_after, limit)
    if _released_within(first):
        return 0
    if limit is None or first < limit:
        _say(f"warning: {_waiting_text(task, peers, first, limit)}")
    if limit is None or _released_within(limit - first):
        return 0
    text = _waiting_text(task, peers, limit, limit)
    if _released_within(0):  # the strategy came up while the peers were probed
        return 0
    _say(f"error: {text} Killing it now (SIGKILL).")
    os.kill(parent, signal.SIGKILL)
    return 0


@contextlib.contextmanager
def watching(config: TFConfig | None, limit=None):
    """Watches the block (TensorFlow building the strategy) for the cluster of
    `config` (None, or a cluster of one task: nothing to wait for); `limit`:
    seconds after which the process is killed, or None (see the module)."""
    if config is None or config.task_type not in _COORDINATED_JOBS or not _peers(config):
        yield
        return
    job = {
        "parent": os.getpid(),
        "task": f"{config.task_type} {config.task_id}",
        "warn_after": WARN_AFTER_S,
        "limit": limit,
        "peers": _peers(config),
    }
    watcher = subprocess.Popen(
        [sys.executable, "-m", __name__, json.dumps(job)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        watcher.stdin.close()
        try:
            watcher.wait(_WATCHER_EXIT_S)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
