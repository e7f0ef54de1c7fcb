"""Runs a command (the test suite) and prints its wall time and its CPU time.

`python tools/suite_time.py COMMAND...` exits with the command's status. The CPU
time is user + system of the command and every process it waited for (pytest's
xdist workers, their subprocesses, pod hosts, cluster tasks). Both swing with the
machine's other load (CPU time less), so compare runs made side by side. A SIGTERM
or SIGHUP sent to this process is passed on to the command, whose own clean-up
then runs; a terminal's Ctrl-C reaches the command directly.
"""

import os
import resource
import signal
import subprocess
import sys
import time


def main(argv):
    if not argv:
        sys.exit("usage: python tools/suite_time.py COMMAND [ARG...]")
    started = time.monotonic()
    command = subprocess.Popen(argv)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda signum, frame: command.send_signal(signum))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # The command, in our process group, gets it.
    code = command.wait()
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
