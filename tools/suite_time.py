"""Runs a command (the test suite) and prints its wall time and its CPU time.

`python tools/suite_time.py COMMAND...` exits with the command's status. The CPU
time is user + system of the command and every process it waited for (pytest's
xdist workers, their subprocesses, pod hosts, cluster tasks): the measure that
load from other users of a shared machine does not swing, where wall time does.
"""

import os
import resource
import subprocess
import sys
import time


def main(argv):
    if not argv:
        sys.exit("usage: python tools/suite_time.py COMMAND [ARG...]")
    started = time.monotonic()
    code = subprocess.call(argv)
    wall = time.monotonic() - started
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = used.ru_utime + used.ru_stime
    cores = os.cpu_count() or 1
    print(f"suite time: {wall:.0f} s wall, {cpu:.0f} s CPU (user {used.ru_utime:.0f} + system "
          f"{used.ru_stime:.0f}; {cpu / cores:.0f} s on each of {cores} cores), load average "
          f"{os.getloadavg()[0]:.1f} at the end", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
