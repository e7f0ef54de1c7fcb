"""Real multi-worker TensorFlow clusters made of local processes.

`local_cluster` starts one fresh Python process per task (an optional chief,
then N workers), each with its own `TF_CONFIG` naming 127.0.0.1 addresses, and
runs an importable function in every task:

    def step():  # at module level, so a worker can import it by name
        strategy = cluster.worker_strategy()
        return strategy.num_replicas_in_sync

    with cluster.local_cluster(num_workers=2) as c:
        assert c.run(step) == [2, 2]

Tasks start once per cluster and are reused by every `run` (importing
TensorFlow is the dominant cost). A worker imports TensorFlow and builds
nothing: the function it runs builds its strategy, because
MultiWorkerMirroredStrategy must be created before any op in a process;
`worker_strategy()` builds it once per worker and caches it.

Faults surface and nothing is left behind: an exception in a task is re-raised
here as `ClusterTaskError` naming the task; a task that dies, hangs or is
stopped past `timeout` fails the call with every task's Python stack; every
exit path ends the tasks (asked to exit, then SIGTERM, then SIGKILL to their
process groups), reaps them and removes the cluster's temporary directory.
Tasks die with this process, and a cluster reaps what a killed run left. After
a fault the cluster is torn down: `run` raises `ClusterError` until `start()`
launches fresh tasks.

One module per role, as pytest-xdist's dsession / workermanage / remote:

    lifecycle   LocalCluster: start, run, tear down (this process)
    host        LocalServers: server tasks for a client in this process (a fake pod's hosts)
    launcher    Launcher: the one place that starts, watches and stops the processes
                of a LocalCluster or a LocalServers (they each own one)
    task        one task process: TaskSpec says what to run, Task is the process
    bootstrap   the first code of every task (`python -m`): stack dumps, dies with
                its parent, SIGTERM ends it; then runs the main its TaskSpec names
    worker      the main of a task that serves `run` (in the task process)
    server      the main of a task that hosts a tf.distribute.Server (a fake pod's host)
    relay       the main of the relay between a client and servers in a private network
    context     current_task() and worker_strategy() (in the task process)
    protocol    the typed messages between the two, and function references
    checks      the arguments' checks, before anything starts
    report      the error texts
    tf_config   the cluster spec and each task's TF_CONFIG
    ports       free loopback ports
    netns       private network namespaces (why: see there)
    workdir     the launch's temp dir; reaping what a killed run left
    hooks       LaunchHooks: fault injection for tests
    errors      ClusterError, ClusterTaskError, ClusterTimeoutError

A new kind of task process is a module with `main(argv, conn)` that says
`protocol.Ready` once set up and serves until `protocol.Exit` (see `server`),
and an owner that builds its `TaskSpec`s and hands them to a `Launcher`
(see `host.LocalServers._launch`). Every deadline scales with
$COMPAT_DISTRIBUTE_TIMEOUT_SCALE (`compat_distribute.testing.deadlines`).
Modules other than the names exported below are internal.

This package is the one place of compat_distribute that launches processes.
"""

from compat_distribute._tf_config import TFConfig
from compat_distribute._tf_config import parse_tf_config
from compat_distribute.testing.cluster.context import current_task
from compat_distribute.testing.cluster.context import worker_strategy
from compat_distribute.testing.cluster.errors import ClusterError
from compat_distribute.testing.cluster.errors import ClusterTaskError
from compat_distribute.testing.cluster.errors import ClusterTimeoutError
from compat_distribute.testing.cluster.hooks import LaunchHooks
from compat_distribute.testing.cluster.lifecycle import LocalCluster
from compat_distribute.testing.cluster.lifecycle import local_cluster
from compat_distribute.testing.cluster.ports import PortPicker
from compat_distribute.testing.cluster.task import TaskSpec

__all__ = [
    "ClusterError",
    "ClusterTaskError",
    "ClusterTimeoutError",
    "LaunchHooks",
    "LocalCluster",
    "PortPicker",
    "TFConfig",
    "TaskSpec",
    "current_task",
    "local_cluster",
    "parse_tf_config",
    "worker_strategy",
]
