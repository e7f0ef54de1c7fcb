"""Test harness: virtual devices, a fake TPU, local multi-worker clusters, an XLA check.

Each public name below is imported from its module on first use, so the pytest
plugin (which lives in this package) imports no TensorFlow unless asked to.
"""

import typing

from compat_distribute import _lazy

if typing.TYPE_CHECKING:  # what IDEs and type checkers see; at run time, the table below
    from compat_distribute.testing._fake_tpu import PRESETS, FakeTPU
    from compat_distribute.testing._fake_tpu import FakeTPUClusterResolver, FakeTPUStrategy
    from compat_distribute.testing._fake_tpu import fake_tpu
    from compat_distribute.testing._fake_tpu import initialize_tpu_system, shutdown_tpu_system
    from compat_distribute.testing.cluster import ClusterError, ClusterTaskError
    from compat_distribute.testing.cluster import ClusterTimeoutError, LaunchHooks
    from compat_distribute.testing.cluster import LocalCluster, TFConfig, current_task
    from compat_distribute.testing.cluster import local_cluster, parse_tf_config
    from compat_distribute.testing.cluster import worker_strategy
    from compat_distribute.testing.devices import set_virtual_devices
    from compat_distribute.testing.testcase import TestCase
    from compat_distribute.testing.xla_check import TPUCompatibilityError
    from compat_distribute.testing.xla_check import TPUCompatibilityReport
    from compat_distribute.testing.xla_check import TPUPerformanceWarning, TPUProblem
    from compat_distribute.testing.xla_check import check_graph, check_tpu_compatible
    from compat_distribute.testing.xla_check import ensure_graph_compatible
    from compat_distribute.testing.xla_check import ensure_tpu_compatible

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    {
        # TFConfig and parse_tf_config are the core's internal API
        # (compat_distribute._tf_config, see its __all__), public here.
        "compat_distribute.testing.cluster": (
            "ClusterError",
            "ClusterTaskError",
            "ClusterTimeoutError",
            "LaunchHooks",
            "LocalCluster",
            "TFConfig",
            "current_task",
            "local_cluster",
            "parse_tf_config",
            "worker_strategy",
        ),
        "compat_distribute.testing.devices": ("set_virtual_devices",),
        "compat_distribute.testing._fake_tpu": (
            "PRESETS",
            "FakeTPU",
            "FakeTPUClusterResolver",
            "FakeTPUStrategy",
            "fake_tpu",
            "initialize_tpu_system",
            "shutdown_tpu_system",
        ),
        "compat_distribute.testing.testcase": ("TestCase",),
        "compat_distribute.testing.xla_check": (
            "TPUCompatibilityError",
            "TPUCompatibilityReport",
            "TPUPerformanceWarning",
            "TPUProblem",
            "check_graph",
            "check_tpu_compatible",
            "ensure_graph_compatible",
            "ensure_tpu_compatible",
        ),
    },
)
