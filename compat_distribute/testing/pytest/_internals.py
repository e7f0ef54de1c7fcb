"""The one adapter to pytest's internals (`_pytest`): the plugin reaches them only here.

Each name is listed in `INTERNALS` ("module:attribute"); one of a row's
alternatives must exist in the installed pytest (tests/shims/test_tf_adapters.py
checks them, as it checks TensorFlow's adapters).
"""

import importlib

INTERNALS = {
    # pytest's command-line entry points: `pytest` and `python -m pytest` call
    # one (`console_main` up to pytest 9.0, `_console_main` since 9.1).
    "command_entries": ("_pytest.config:console_main", "_pytest.config:_console_main"),
}


def _found(targets):
    for target in targets:
        module, _, attribute = target.partition(":")
        value = getattr(importlib.import_module(module), attribute, None)
        if value is not None:
            yield value


def command_entry_codes():
    """The code objects of pytest's command-line entry points in this pytest."""
    return tuple(entry.__code__ for entry in _found(INTERNALS["command_entries"]))
