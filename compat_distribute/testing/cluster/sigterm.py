"""SIGTERM ends a task at once, also once TensorFlow has taken the signal (internal).

`arm` (bootstrap, before the task's main) installs a Python handler and a
thread that end the task on SIGTERM, within a Python handler or while the main
thread is blocked in TensorFlow. Building a MultiWorkerMirroredStrategy starts
TensorFlow's coordination service, whose preemption notifier installs a
C-level SIGTERM handler of its own that only records the signal: the task
would no longer end. `reclaim` puts Python's handler back wherever it was
replaced underneath Python (a handler the task's own code installs with
`signal.signal`, such as PreemptionCheckpointHandler's, is left alone); the
thread reclaims every `RECLAIM_S`, and the worker at once after each strategy
it builds and after each call.
"""

import ctypes
import os
import select
import signal
import sys
import threading

__all__ = ["RECLAIM_S", "arm", "reclaim"]

# How often the thread puts Python's SIGTERM handler back where it was replaced.
RECLAIM_S = 0.05
# Room for the C library's struct sigaction (152 bytes with glibc on 64-bit Linux).
_SIGACTION_BYTES = 512

_armed = None  # This process's `_Ends`, once armed.


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _action():
    """The C-level SIGTERM action of this process, as the C library's bytes."""
    action = ctypes.create_string_buffer(_SIGACTION_BYTES)
    if _libc().sigaction(signal.SIGTERM, None, action) != 0:
        raise OSError(ctypes.get_errno(), "sigaction(SIGTERM) could not be read")
    return action


class _Ends:
    def __init__(self, exit_code):
        self._exit_code = exit_code
        self._ending = threading.Lock()
        self._python_action = None  # Python's C-level action, taken once it is installed.

    def arm(self):
        wakeup, woken = os.pipe()
        os.set_blocking(woken, False)
        signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._python_action = _action()
        threading.Thread(
            target=self._end_on_sigterm, args=(wakeup,), name="SIGTERM ends the task", daemon=True
        ).start()

    def reclaim(self):
        if signal.getsignal(signal.SIGTERM) != self._on_sigterm:
            return  # The task's own code installed a handler: its business.
        if _action().raw[: ctypes.sizeof(ctypes.c_void_p)] != self._python_action.raw[
            : ctypes.sizeof(ctypes.c_void_p)
        ]:
            _libc().sigaction(signal.SIGTERM, self._python_action, None)

    def _end(self):
        if not self._ending.acquire(blocking=False):
            return  # The handler or the thread is ending the task already.
        sys.stdout.flush()
        sys.stderr.write(f"pid {os.getpid()} got SIGTERM: it ends now.\n")
        sys.stderr.flush()
        os._exit(self._exit_code)

    def _on_sigterm(self, signum, frame):
        del signum, frame
        self._end()

    def _end_on_sigterm(self, wakeup):
        while True:
            if select.select([wakeup], [], [], RECLAIM_S)[0]:
                if signal.SIGTERM in os.read(wakeup, 64):
                    if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                        self._end()
            self.reclaim()


def arm(exit_code):
    """Makes SIGTERM end this process with `exit_code` (see the module)."""
    global _armed
    _armed = _Ends(exit_code)
    _armed.arm()


def reclaim():
    """Puts Python's SIGTERM handler back where TensorFlow replaced it (see the module)."""
    if _armed is not None:
        _armed.reclaim()
