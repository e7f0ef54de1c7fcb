"""compat_distribute: TF1 distribution-strategy code on real TF2 `tf.distribute`.

Importing this package starts no TensorFlow runtime: devices and collective ops
can still be configured afterwards.
"""

from compat_distribute.install import install
from compat_distribute.install import installed
from compat_distribute.install import is_installed
from compat_distribute.install import uninstall
from compat_distribute.multi_worker import CollectiveCommunication
from compat_distribute.multi_worker import MultiWorkerMirroredStrategy
from compat_distribute.tpu import TPUStrategy

__version__ = "0.1.0"

__all__ = (
    "CollectiveCommunication",
    "MultiWorkerMirroredStrategy",
    "TPUStrategy",
    "install",
    "installed",
    "is_installed",
    "uninstall",
)
