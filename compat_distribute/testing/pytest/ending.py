"""Ends the process once a session that used TensorFlow is over.

TensorFlow 2.21 can block for minutes at exit (see `compat_distribute._exit`).
`COMPAT_DISTRIBUTE_END_PROCESS=0` leaves every process to Python's own exit.
"""

import sys

from compat_distribute import _env
from compat_distribute import _exit
from compat_distribute.testing.pytest import _internals

_COMMAND_ENTRIES = _internals.command_entry_codes()


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


SWITCH = "COMPAT_DISTRIBUTE_END_PROCESS"


def end_if_done(config, status):
    """Ends the process with `status` when TensorFlow was imported, the session owns
    it, and `$COMPAT_DISTRIBUTE_END_PROCESS` is not 0."""
    if "tensorflow" in sys.modules and _env.read(SWITCH) and owns_its_process(config):
        _exit.end_process(int(status))
