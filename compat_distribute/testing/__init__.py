"""Test harness: virtual devices, a fake TPU, local multi-worker clusters, an XLA check."""

from compat_distribute.testing.cluster import ClusterError
from compat_distribute.testing.cluster import ClusterTaskError
from compat_distribute.testing.cluster import ClusterTimeoutError
from compat_distribute.testing.cluster import LocalCluster
from compat_distribute.testing.cluster import TFConfig
from compat_distribute.testing.cluster import current_task
from compat_distribute.testing.cluster import local_cluster
from compat_distribute.testing.cluster import parse_tf_config
from compat_distribute.testing.cluster import pick_unused_port
from compat_distribute.testing.cluster import worker_strategy
from compat_distribute.testing.devices import set_virtual_devices
from compat_distribute.testing.xla_check import TPUCompatibilityError
from compat_distribute.testing.xla_check import TPUCompatibilityReport
from compat_distribute.testing.xla_check import TPUPerformanceWarning
from compat_distribute.testing.xla_check import TPUProblem
from compat_distribute.testing.xla_check import check_graph
from compat_distribute.testing.xla_check import check_tpu_compatible
from compat_distribute.testing.xla_check import ensure_graph_compatible
from compat_distribute.testing.xla_check import ensure_tpu_compatible

__all__ = (
    "ClusterError",
    "ClusterTaskError",
    "ClusterTimeoutError",
    "LocalCluster",
    "TFConfig",
    "current_task",
    "local_cluster",
    "parse_tf_config",
    "pick_unused_port",
    "worker_strategy",
    "TPUCompatibilityError",
    "TPUCompatibilityReport",
    "TPUPerformanceWarning",
    "TPUProblem",
    "check_graph",
    "check_tpu_compatible",
    "ensure_graph_compatible",
    "ensure_tpu_compatible",
    "set_virtual_devices",
)
