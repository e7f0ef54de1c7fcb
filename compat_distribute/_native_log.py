"""Holding back TensorFlow's native log lines from a command's stderr.

Some come before TF_CPP_MIN_LOG_LEVEL is read; they are shown when a run fails.
"""

import collections
import os
import sys
import threading
import time

KEPT_LINES = 200


class HeldBack:
    """The native lines written since `hold_back()`, the last `KEPT_LINES` of them."""

    def __init__(self, read_fd):
        self._lines = collections.deque(maxlen=KEPT_LINES)
        self._partial = b""
        self._read_fd = read_fd
        self._last_read = time.monotonic()
        threading.Thread(target=self._drain, name="native-log", daemon=True).start()

    def _drain(self):
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self._last_read = time.monotonic()
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            self._lines.extend(line.decode("utf-8", "replace") for line in lines)

    def lines(self, settle_s=0.2):
        """The held lines, after the pipe has been quiet for `settle_s`."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() - self._last_read < settle_s and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self._lines)

    def show(self, stream, why):
        lines = self.lines()
        if lines:
            stream.write(
                f"TensorFlow's native log (last {len(lines)} lines), shown because {why}:\n"
            )
            stream.write("".join(f"  {line}\n" for line in lines))
            stream.flush()


def hold_back():
    """Routes descriptor 2 to a pipe; returns the `HeldBack` lines."""
    sys.stderr.flush()
    real_stderr = os.dup(2)
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    sys.stderr = open(  # pylint: disable=consider-using-with
        real_stderr, "w", buffering=1, encoding="utf-8", errors="backslashreplace"
    )
    return HeldBack(read_fd)
