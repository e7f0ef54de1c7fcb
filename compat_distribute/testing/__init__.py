"""Test harness: virtual devices, a fake TPU, local multi-worker clusters, an XLA check."""

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
