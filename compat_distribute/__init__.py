"""compat_distribute: TF1 distribution-strategy code on real TF2 `tf.distribute`.

Importing this package imports no TensorFlow and starts no runtime: devices and
collective ops can still be configured afterwards. Each public name below is
imported from its module on first use.
"""

from compat_distribute import _lazy

__version__ = "0.1.0"

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
