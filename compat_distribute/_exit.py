"""Ending a process that used TensorFlow, without waiting on its teardown.

TensorFlow 2.21 can block for minutes at interpreter exit while it destroys
tf.data iterators: each one joins its autotuning thread, which sleeps out its
optimisation period (up to a minute) instead of waking when cancelled (seen in
`UnboundedThreadPool::LogicalThreadWrapper`'s destructor). A command whose
report is out, or a test session whose results are in, therefore ends the
process itself. It runs the `atexit` handlers first, so that what they clean
up (AutoGraph's `__autograph_generated_file*.py` in the temp dir, pending
asynchronous checkpoints, TPU work in flight) is cleaned up; only the
interpreter's final garbage collection is skipped.
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
