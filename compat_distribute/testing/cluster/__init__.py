"""Real multi-worker TensorFlow clusters made of local processes (docs/clusters.md).

`local_cluster` starts one Python process per task (chief, workers, parameter
servers, evaluator), each with its own `TF_CONFIG` naming 127.0.0.1 addresses,
and runs an importable function in every task:

    def step():  # at module level, so a task can import it by name
        strategy = cluster.worker_strategy()
        return strategy.num_replicas_in_sync

    with cluster.local_cluster(num_workers=2) as c:
        assert c.run(step) == [2, 2]

Tasks start once and are reused by every `run`; one task can be killed and
started again at its address. A task's exception comes back as a
`ClusterTaskError` that is also of the task's class; a task that dies, hangs or
is stopped fails the call with every task's stack; every exit path ends the
tasks and removes the cluster's directory.

One module per role:

    lifecycle   LocalCluster: start, run, per-task control, tear down (this process)
    calls       one call: send, collect, restart or fail, the evidence of a fault
    watcher     the thread that notices a task's end between runs, and streams output
    host        LocalServers: server tasks for a client in this process (a fake pod's hosts)
    launcher    Launcher: starts, watches and stops the processes of one launch
    task        one task process: TaskSpec says what to run, Task is the process
    zygote      both ends of the process that imports TensorFlow once and forks the tasks
    netns       how a launch's tasks get their network (a private namespace, or the host's)
    relay       both ends of the relay between a client here and servers in a private network
    bootstrap   the first code of every task (`python -m`): stack dumps, dies with its parent
    sigterm     SIGTERM ends a task at once, also after TensorFlow took the signal
    worker      the main of a task that serves `run` (in the task process)
    server      the main of a task that hosts a tf.distribute.Server (a fake pod's host)
    context     current_task() and worker_strategy() (in the task process)
    protocol    the typed messages between the two, and function references
    checks      the arguments' checks, before anything starts
    report      the error texts
    output      each task's output, streamed behind its prefix
    tf_config   the cluster spec and each task's TF_CONFIG
    ports       free loopback ports
    workdir     the launch's temp dir, kept logs; reaping what a killed run left
    hooks       LaunchHooks: fault injection for tests
    errors      ClusterError, ClusterTaskError, ClusterTimeoutError

Every deadline scales with $COMPAT_DISTRIBUTE_TIMEOUT_SCALE
(`compat_distribute.testing.deadlines`). Modules other than the names exported
below are internal. This package is the one place of compat_distribute that
launches processes.
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
