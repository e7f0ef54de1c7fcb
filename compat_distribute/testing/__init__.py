"""Test harness: virtual devices, a fake TPU, local multi-worker clusters, an XLA check.

Each public name below is imported from its module on first use, so the pytest
plugin (which lives in this package) imports no TensorFlow unless asked to.
"""

from compat_distribute import _lazy

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
            "pick_unused_port",
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
