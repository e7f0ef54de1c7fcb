"""Names imported on first use: public faces, and the adapters to TensorFlow internals.

pytest imports the package for its plugin in every run; TensorFlow costs seconds.
"""

import importlib
import sys


def attach(package, exports):
    """Returns `(__getattr__, __dir__, __all__)` for `package`.

    `exports` maps a module path to the public names it defines.
    """
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name):  # pylint: disable=invalid-name
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        _cache(package, name, value)
        return value

    def __dir__():  # pylint: disable=invalid-name
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__, tuple(sorted(where))


def _cache(module_name, name, value):
    """Sets `name` on the module, so later lookups skip its `__getattr__`.

    A module can be looked up after it left `sys.modules` (pytester's in-process
    runs restore `sys.modules` afterwards): then the value is simply not cached.
    """
    module = sys.modules.get(module_name)
    if module is not None:
        setattr(module, name, value)


def load(target):
    """The object a target names: `"package.module"` or `"package.module:Attr.attr"`."""
    module, _, attrs = target.partition(":")
    obj = importlib.import_module(module)
    for attr in attrs.split(".") if attrs else ():
        obj = getattr(obj, attr)
    return obj


def adapter(module_name, internals):
    """Returns `__getattr__` for an adapter module serving `internals` (name -> target)."""

    def __getattr__(name):  # pylint: disable=invalid-name
        target = internals.get(name)
        if target is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = load(target)
        _cache(module_name, name, value)
        return value

    return __getattr__
