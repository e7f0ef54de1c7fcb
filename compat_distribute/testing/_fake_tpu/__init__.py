"""A TPU that lives on virtual CPU devices and refuses what a real TPU refuses.

One concept a module; the topology names import no TensorFlow, the rest load on
first use.
"""

from compat_distribute import _lazy
from compat_distribute.testing._fake_tpu.topologies import DEFAULT_TOPOLOGY
from compat_distribute.testing._fake_tpu.topologies import PRESETS

__getattr__, __dir__, _LAZY = _lazy.attach(
    __name__,
    {
        "compat_distribute.testing._fake_tpu.patch": ("FakeTPU", "fake_tpu"),
        "compat_distribute.testing._fake_tpu.tf_calls": ("FakeTPUClusterResolver",),
        "compat_distribute.testing._fake_tpu.system": (
            "initialize_tpu_system",
            "shutdown_tpu_system",
        ),
        "compat_distribute.testing._fake_tpu.strategy": ("FakeTPUStrategy",),
    },
)
__all__ = ("DEFAULT_TOPOLOGY", "PRESETS") + _LAZY
