"""Routes TF1's strategy names to the shims, so unmodified code picks them up.

After `install()`, `tf.compat.v1.distribute.experimental.TPUStrategy` and
`.MultiWorkerMirroredStrategy` are `compat_distribute.TPUStrategy` and
`compat_distribute.MultiWorkerMirroredStrategy`. `uninstall()` puts TF's own
objects back. `installed()` does both around a block and restores the state it
found, so nesting and repeated installs are safe.
"""

import contextlib

from compat_distribute import _patching
from compat_distribute import multi_worker
from compat_distribute import tpu

_V1 = "compat.v1.distribute.experimental"

_patch = _patching.Patch(
    [
        (_V1, "TPUStrategy", tpu.TPUStrategy),
        (_V1, "MultiWorkerMirroredStrategy", multi_worker.MultiWorkerMirroredStrategy),
    ]
)


def install():
    """Routes the TF1 strategy names to the shims. Installing twice is a no-op."""
    if not _patch.active:
        _patch.start()


def uninstall():
    """Restores TensorFlow's own objects. A no-op when not installed."""
    _patch.stop()


def is_installed():
    return _patch.active


@contextlib.contextmanager
def installed():
    """`install()` for the duration of a block, then the state found on entry."""
    was_installed = is_installed()
    install()
    try:
        yield
    finally:
        if not was_installed:
            uninstall()
