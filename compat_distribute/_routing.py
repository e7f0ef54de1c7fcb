"""Routes TensorFlow's historical strategy names to the shims, so unmodified code picks them up.

`install()` / `uninstall()` / `installed()`; the spellings are data (`SPELLINGS`),
from which docs/migration.md's tables are generated.
"""

import contextlib
import dataclasses
import importlib
import sys

from compat_distribute import _contrib
from compat_distribute import _patching

TPU = "TPUStrategy"
MWMS = "MultiWorkerMirroredStrategy"


@dataclasses.dataclass(frozen=True)
class Spelling:
    """One public name of a V1 strategy class, TF 1.13 to 2.4."""

    path: str  # below `tensorflow`, e.g. "compat.v1.distribute.experimental"
    name: str
    shim: str  # TPU or MWMS
    versions: str  # the TensorFlow versions that had it
    routed: bool
    why: str

    @property
    def spelling(self):
        return f"tf.{self.path}.{self.name}"


# From TensorFlow's v1 and v2 API goldens (tensorflow/tools/api/golden) and
# release notes, TF 1.13 to 2.4; "-2.21" where the name still exists today.
SPELLINGS = (
    Spelling("compat.v1.distribute.experimental", TPU, TPU, "1.14-2.21", True,
             "TF1's own class: V1 signature and members."),
    Spelling("compat.v1.distribute.experimental", MWMS, MWMS, "1.14-2.21", True,
             "TF1's own class: V1 signature and members."),
    Spelling("distribute.experimental", TPU, TPU, "1.14-2.21", True,
             "TF 1.14-1.15 code passes steps_per_run here (the V1 class then), TF 2.0-2.2 "
             "code a DeviceAssignment second and calls experimental_run_v2: the shim "
             "takes both."),
    Spelling("distribute.experimental", MWMS, MWMS, "1.14-2.21", True,
             "TF 1.14-2.3 code passes communication= (V1 signature) and TF 2.0-2.1 code "
             "calls experimental_run_v2: the shim serves both."),
    Spelling("compat.v2.distribute.experimental", TPU, TPU, "1.14-2.21", True,
             "The same class as tf.distribute.experimental under TF2's names."),
    Spelling("compat.v2.distribute.experimental", MWMS, MWMS, "1.14-2.21", True,
             "The same class as tf.distribute.experimental under TF2's names."),
    Spelling("distribute", TPU, TPU, "2.3-2.21", False,
             "Today's TF2 class with today's signature: code written for it needs no shim."),
    Spelling("distribute", MWMS, MWMS, "2.4-2.21", False,
             "Today's TF2 class with today's signature: code written for it needs no shim."),
    Spelling("compat.v2.distribute", TPU, TPU, "2.3-2.21", False,
             "The same class as tf.distribute.TPUStrategy: needs no shim."),
    Spelling("compat.v2.distribute", MWMS, MWMS, "2.4-2.21", False,
             "The same class as tf.distribute.MultiWorkerMirroredStrategy: needs no shim."),
)


def _shim(kind):
    if kind == TPU:
        from compat_distribute import tpu

        return tpu.TPUStrategy
    from compat_distribute import multi_worker

    return multi_worker.MultiWorkerMirroredStrategy


_patch = None


def _routes():
    routes = [(s.path, s.name, _shim(s.shim)) for s in SPELLINGS if s.routed]
    # TF1 code reaches tf.contrib from `import tensorflow as tf` and, once migrated,
    # from `import tensorflow.compat.v1 as tf`.
    return routes + [("", "contrib", _contrib.module()), ("compat.v1", "contrib", _contrib.module())]


def _contrib_modules():
    """`tensorflow.contrib` and its modules by import name, for `from tensorflow.contrib import ...`."""
    contrib = _contrib.module()
    return {contrib.__name__: contrib} | {
        getattr(contrib, name).__name__: getattr(contrib, name) for name in contrib.__all__
    }


def install():
    """Routes every historical spelling to the shims and adds `tf.contrib`. Installing twice is a no-op."""
    global _patch
    if _patch is None:
        # `import tensorflow.compat.v1` replaces the object that `tf.compat.v1` gave
        # before it: import it first, so that tf.compat.v1.contrib lands on the module
        # a later import statement binds.
        importlib.import_module("tensorflow.compat.v1")
        # Above fake_tpu()'s routes whatever the order: the shims build the fake's
        # strategies from its resolver, and also take the historical signatures.
        # Classes bound before install() build the shims too (forward_bound).
        _patch = _patching.Patch(_routes(), precedence=1, forward_bound=True).start()
        for name, module in _contrib_modules().items():
            sys.modules.setdefault(name, module)


def uninstall():
    """Restores TensorFlow's own objects and removes `tf.contrib`. A no-op when not installed.

    It restores only what `install()` changed. Two process-wide changes come
    from building the shims' strategies, installed or not, and stay: Keras'
    `compile` taking `steps_per_execution` from a strategy's `steps_per_run`
    (`compat_distribute.keras.compile_takes_steps_per_run`, started by a
    `TPUStrategy` with `steps_per_run > 1`) and distributed input whose
    per-device pipelines run without tf.data autotuning (started by the first
    distributed dataset). Strategies built before `uninstall()` keep working
    with them; neither changes a program that uses no such strategy.
    """
    global _patch
    if _patch is not None:
        _patch.stop()
        _patch = None
        for name, module in _contrib_modules().items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


def is_installed():
    return _patch is not None


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


def spellings_markdown():
    """docs/migration.md's table of historical spellings and their routes."""
    lines = ["| spelling | TensorFlow | after `install()` | why |", "|---|---|---|---|"]
    for s in SPELLINGS:
        route = f"`compat_distribute.{s.shim}`" if s.routed else "not routed"
        lines.append(f"| `{s.spelling}` | {s.versions} | {route} | {s.why} |")
    return "\n".join(lines)
