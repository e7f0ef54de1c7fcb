"""The user's line that created an op: the innermost frame outside the libraries."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import sysconfig


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """Directories whose frames are never the user's line."""
    roots = [sysconfig.get_paths()["stdlib"]]
    for name in ("tensorflow", "keras", "tf_keras", "compat_distribute"):
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None)
        if origin is None:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec else None
        if origin:
            roots.append(os.path.dirname(os.path.realpath(origin)))
    return tuple(os.path.join(r, "") for r in roots)


@functools.lru_cache(maxsize=4096)
def _real(filename: str) -> str:
    return os.path.realpath(filename)


def user_frame(op) -> tuple[str | None, int | None]:
    """`(filename, lineno)` of the op's creation outside TF and this package, or `(None, None)`."""
    try:
        frames = op.traceback
    except (AttributeError, ValueError):
        return None, None
    roots = _library_roots()
    for frame in reversed(list(frames or ())):
        filename = frame.filename
        if os.path.basename(filename).startswith("__autograph_generated_file"):
            continue
        if _real(filename).startswith(roots):
            continue
        return filename, frame.lineno
    return None, None
