"""compat_distribute: TF1 distribution-strategy code on real TF2 `tf.distribute`.

Importing this package imports no TensorFlow and starts no runtime: devices and
collective ops can still be configured afterwards. Each public name below is
imported from its module on first use.

Public names:
  TPUStrategy, MultiWorkerMirroredStrategy, CollectiveCommunication
      TF1's strategy classes with their V1 signatures and members, on TF2.
  install(), uninstall(), installed(), is_installed()
      Route TensorFlow's historical names (and `tf.contrib`'s distribution
      names) to the shims, so unmodified TF1 code picks them up.

Public modules:
  compat_distribute.keras
      TF1's `steps_per_run` as Keras' `steps_per_execution`
      (`steps_per_execution`, `keras_compile_kwargs`), the fix that lets Keras 3
      run several steps per execution on 2+ replicas (`multi_step_fix`), and
      which Keras `tf.keras` is (`tf_keras_version`).
  compat_distribute.checkpoint
      Where each worker writes its checkpoints under a multi-worker strategy
      (`checkpoint_dir`, `checkpoint_dir_for`, `is_chief`).
  compat_distribute.testing
      The test harness: fake TPUs, local multi-worker clusters, the XLA check.

Every other module is internal (docs/design.md, "What is public").
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
