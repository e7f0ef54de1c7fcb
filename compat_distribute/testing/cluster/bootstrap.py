"""The first code of every task process (internal): `python -m` this module.

    python -m compat_distribute.testing.cluster.bootstrap FD PARENT_PID DEATH_SIGNAL MAIN [ARG ...]
    python -m compat_distribute.testing.cluster.bootstrap FD PARENT_PID DEATH_SIGNAL --zygote [MAIN ...]

FD: the process's end of its socket to the launcher; DEATH_SIGNAL: "1" to set
the parent-death signal (Linux); MAIN: "module" or "module:function", whose
`main(argv, conn) -> exit status` runs next with the remaining arguments.

Before anything else it arms the SIGUSR1 stack dump, ties the process's life to
its parent's, and makes SIGTERM end the task at once (`sigterm`); then it says
`protocol.Alive` and runs MAIN, and ends the process once MAIN returns (atexit
handlers run; interpreter teardown, which TensorFlow can stall for seconds, is
skipped: a task whose launcher died ends at once). Nothing before `Alive`
imports TensorFlow (the packages above this module import none), so a task
stuck importing it can still dump its stack. `task.Task` builds this command
line; nothing imports this module (runpy would then run a second copy).

With `--zygote` the process becomes a launch's zygote (see `zygote`): it arms
the stack dump and the parent-death signal, starts no thread, imports
TensorFlow and the MAINs' modules, and forks the tasks; each forked task runs
`_run_forked`, which arms the rest as above with the zygote as its parent.
"""

import faulthandler
import os
import signal
import sys
import threading
import time

__all__ = ["ORPHAN_EXIT_CODE", "main"]

# What a task whose parent is gone exits with.
ORPHAN_EXIT_CODE = 70
# How often a task looks whether its parent is gone.
_ORPHAN_POLL_S = 0.5


def _set_parent_death_signal():
    import ctypes  # pylint: disable=g-import-not-at-top

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


# The names of this thread's function and of `sigterm._Ends._end_on_sigterm`
# are `task.WATCHDOG_FRAMES`, left out of stack dumps.
def _exit_when_orphaned(parent):
    while os.getppid() == parent:
        time.sleep(_ORPHAN_POLL_S)
    os._exit(ORPHAN_EXIT_CODE)


def _tie_to_parent(parent, death_signal):
    """The parent-death signal (when asked), then a check that `parent` still
    is the parent: it may have died before the signal was set."""
    if death_signal:
        _set_parent_death_signal()
    if os.getppid() != parent:
        os._exit(ORPHAN_EXIT_CODE)


def _run(fd, parent, main_name, argv):
    """Watches the parent, arms SIGTERM, says Alive on `fd`, runs the main, ends the process."""
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()

    # Imported here: the lines above must run first, whatever these import.
    import importlib  # pylint: disable=g-import-not-at-top
    from multiprocessing import connection  # pylint: disable=g-import-not-at-top

    from compat_distribute import _exit  # pylint: disable=g-import-not-at-top
    from compat_distribute.testing.cluster import protocol  # pylint: disable=g-import-not-at-top
    from compat_distribute.testing.cluster import report  # pylint: disable=g-import-not-at-top
    from compat_distribute.testing.cluster import sigterm  # pylint: disable=g-import-not-at-top

    sigterm.arm(report.SIGTERM_EXIT_CODE)
    os.set_inheritable(fd, False)
    conn = connection.Connection(fd)
    conn.send(protocol.Alive(os.getpid()))
    module, _, function = main_name.partition(":")
    status = getattr(importlib.import_module(module), function or "main")(argv, conn)
    _exit.end_process(0 if status is None else status if isinstance(status, int) else 1)


def _run_forked(fd, zygote, main_name, argv):
    """The task's start in a process the zygote (pid `zygote`) forked: its
    stdout, stderr and environment are the task's already."""
    faulthandler.enable()  # Re-armed on this process's own stderr.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    _tie_to_parent(zygote, True)  # The zygote forks on its main thread.
    _run(fd, zygote, main_name, argv)


def main(argv):
    """Runs the task (or the zygote) described by `argv` (see the module)."""
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # Imports no TensorFlow (only `serve` does); a parent that dies meanwhile is caught below.
    from compat_distribute.testing.cluster import zygote  # pylint: disable=g-import-not-at-top

    fd, parent, death_signal, main_name = argv[:4]
    _tie_to_parent(int(parent), death_signal == "1")
    if main_name == zygote.FLAG:
        zygote.serve(int(fd), int(parent), argv[4:], _run_forked, ORPHAN_EXIT_CODE)
    _run(int(fd), int(parent), main_name, argv[4:])


if __name__ == "__main__":
    main(sys.argv[1:])
