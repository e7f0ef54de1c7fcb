"""Ending a process that used TensorFlow, without waiting on its teardown.

TensorFlow 2.21 can block for minutes at exit destroying tf.data iterators: the
`atexit` handlers run, then the process ends.
"""

import atexit
import os
import sys


def end_process(code):
    """Flushes the standard streams, runs the atexit handlers, then `os._exit(code)`."""
    atexit._run_exitfuncs()  # pylint: disable=protected-access
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing left to say
            pass
    os._exit(code)  # pylint: disable=protected-access
