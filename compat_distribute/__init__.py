"""compat_distribute: TF1 distribution-strategy code on real TF2 `tf.distribute`.

Public names load on first use, so importing the package imports no TensorFlow
and starts no runtime: devices can still be configured afterwards.
"""

import importlib.metadata
import typing

from compat_distribute import _lazy

try:  # One version, setup.cfg's, read from the installed package's metadata.
    __version__ = importlib.metadata.version("compat_distribute")
except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

if typing.TYPE_CHECKING:  # what IDEs and type checkers see; at run time, the table below
    from compat_distribute._routing import install, installed, is_installed, uninstall
    from compat_distribute.multi_worker import CollectiveCommunication
    from compat_distribute.multi_worker import MultiWorkerMirroredStrategy
    from compat_distribute.tpu import TPUStrategy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    {
        "compat_distribute._routing": ("install", "installed", "is_installed", "uninstall"),
        "compat_distribute.multi_worker": (
            "CollectiveCommunication",
            "MultiWorkerMirroredStrategy",
        ),
        "compat_distribute.tpu": ("TPUStrategy",),
    },
)
