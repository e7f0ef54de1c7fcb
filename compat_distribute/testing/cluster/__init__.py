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
tasks and removes the cluster's directory. This package is the one place of
compat_distribute that launches processes; docs/design.md lists its modules,
one a role (those not exported below are internal).
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
