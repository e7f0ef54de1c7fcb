"""A TPU that lives on virtual CPU devices and refuses what a real TPU refuses.

One concept a module: `topologies` (the presets, as data), `resolver` (the
cluster resolver and TPU system calls), `extended` and `strategy` (the
strategy, a MirroredStrategy with the TPU's rules), `variables` (TPU read rules
for its variables), `patch` (`FakeTPU` / `fake_tpu()`, routing TensorFlow's TPU
entry points to the fake). The public names are served by
`compat_distribute.testing`.
"""

from compat_distribute.testing._fake_tpu.patch import FakeTPU
from compat_distribute.testing._fake_tpu.patch import fake_tpu
from compat_distribute.testing._fake_tpu.resolver import FakeTPUClusterResolver
from compat_distribute.testing._fake_tpu.resolver import initialize_tpu_system
from compat_distribute.testing._fake_tpu.resolver import shutdown_tpu_system
from compat_distribute.testing._fake_tpu.strategy import FakeTPUStrategy
from compat_distribute.testing._fake_tpu.topologies import DEFAULT_TOPOLOGY
from compat_distribute.testing._fake_tpu.topologies import PRESETS
from compat_distribute.testing._fake_tpu.topologies import TOPOLOGIES
