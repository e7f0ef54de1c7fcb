"""Each task's output, live on this process's stdout with a `[worker-1] ` prefix (internal).

`LocalCluster(stream_output=True)` has its watcher call `Streamer.pump` each
tick, during runs and between them: the complete lines the tasks appended to
their logs since the last pump are written, each behind its task's prefix; a
last `pump(final=True)` before the logs go writes what is left.
"""

import sys

__all__ = ["Streamer", "prefix"]


def prefix(name):
    """ "[worker-1] " for the task "worker 1"."""
    return f"[{name.replace(' ', '-')}] "


class Streamer:
    """Copies the logs `paths` ({task name: log path}) to this process's stdout."""

    def __init__(self, paths):
        self._paths = dict(paths)
        self._read = {name: 0 for name in self._paths}  # Bytes of each log written out.
        self._partial = {name: b"" for name in self._paths}  # A line not ended yet.

    def pump(self, final=False):
        written = False
        for name, path in self._paths.items():
            try:
                with open(path, "rb") as f:
                    f.seek(self._read[name])
                    data = f.read()
            except FileNotFoundError:  # Not started yet.
                continue
            self._read[name] += len(data)
            *lines, self._partial[name] = (self._partial[name] + data).split(b"\n")
            if final and self._partial[name]:
                lines.append(self._partial[name])
                self._partial[name] = b""
            for line in lines:
                sys.stdout.write(prefix(name) + line.decode("utf-8", "replace") + "\n")
                written = True
        if written:
            sys.stdout.flush()
