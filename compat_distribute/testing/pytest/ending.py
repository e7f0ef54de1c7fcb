"""Ends the process once a session that used TensorFlow is over.

TensorFlow 2.21 can block for minutes at exit (see `compat_distribute._exit`).
"""

import sys

from _pytest import config as pytest_config

from compat_distribute import _exit

# pytest's command-line entry points: `pytest` and `python -m pytest` call one
# (`console_main` up to pytest 9.0, `_console_main` since 9.1).
_COMMAND_ENTRIES = tuple(
    getattr(pytest_config, name).__code__
    for name in ("console_main", "_console_main")
    if hasattr(pytest_config, name)
)


def _is_the_commands_session(config):
    """Whether `config` belongs to the session of the `pytest` command, which exits after it.

    The command's entry point calls pytest's main, which holds `config`; a
    session started inside another (pytester's in-process runs) is not that one.
    """
    frame, callee = sys._getframe(), None  # pylint: disable=protected-access
    while frame is not None:
        if frame.f_code in _COMMAND_ENTRIES:
            return callee is not None and callee.f_locals.get("config") is config
        frame, callee = frame.f_back, frame
    return False


def owns_its_process(config):
    """Whether the process ends when this session does: the command's, or an xdist worker's."""
    return hasattr(config, "workerinput") or _is_the_commands_session(config)


def end_if_done(config, status):
    """Ends the process with `status` when TensorFlow was imported and the session owns it."""
    if "tensorflow" in sys.modules and owns_its_process(config):
        _exit.end_process(int(status))
