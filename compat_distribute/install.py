"""Routes TF1's strategy names to the shims, so unmodified code picks them up.

After `install()`, `tf.compat.v1.distribute.experimental.TPUStrategy` and
`.MultiWorkerMirroredStrategy` are `compat_distribute.TPUStrategy` and
`compat_distribute.MultiWorkerMirroredStrategy`. `uninstall()` puts TF's own
objects back. `installed()` does both around a block, and restores the state it
found, so nesting and repeated installs are safe.
"""

import contextlib

from compat_distribute import multi_worker
from compat_distribute import tpu

# (module path under `tensorflow`, attribute) -> shim.
_ROUTES = (
    ("compat.v1.distribute.experimental", "TPUStrategy", tpu.TPUStrategy),
    (
        "compat.v1.distribute.experimental",
        "MultiWorkerMirroredStrategy",
        multi_worker.MultiWorkerMirroredStrategy,
    ),
)

_saved = {}  # (module path, attribute) -> TF's own object, while installed.


def _module(path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    module = tf
    for part in path.split("."):
        module = getattr(module, part)
    return module


def install():
    """Routes the TF1 strategy names to the shims. Installing twice is a no-op."""
    if _saved:
        return
    for path, name, shim in _ROUTES:
        module = _module(path)
        _saved[(path, name)] = getattr(module, name)
        setattr(module, name, shim)


def uninstall():
    """Restores TensorFlow's own objects. A no-op when not installed."""
    while _saved:
        (path, name), original = _saved.popitem()
        setattr(_module(path), name, original)


def is_installed():
    return bool(_saved)


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
