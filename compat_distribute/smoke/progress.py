"""A one-line ticker on stderr while a check runs, only when stderr is a TTY."""

import sys
import threading
import time


class Progress:
    """`start(label)` shows "label 1.2s", refreshed every `interval`; `stop()` clears it."""

    def __init__(self, stream=None, interval=0.2):
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self._stop = threading.Event()
        self._thread = None
        self._label = ""

    def start(self, label):
        if not self.enabled:
            return
        self._label = label
        self._stop.clear()
        started = time.perf_counter()

        def tick():
            while not self._stop.wait(self.interval):
                self.stream.write(f"\r  {self._label} {time.perf_counter() - started:5.1f}s")
                self.stream.flush()

        self._thread = threading.Thread(target=tick, daemon=True)
        self._thread.start()

    def stop(self):
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.stream.write("\r\033[K")  # clear the ticker line
        self.stream.flush()


class Silent(Progress):
    """A `Progress` that never shows anything (the default of `run_checks`)."""

    def __init__(self):
        super().__init__(stream=None)
        self.enabled = False
