"""The thread that watches a running cluster between (and during) its runs (internal).

Each `INTERVAL_S` it streams the tasks' new output (`output.Streamer`, when
asked) and, when no run or start holds the cluster's lock, calls the
cluster's `notice` (a task that ended: restart it, keep it down, or say so).
Watchers still running at exit are stopped before the launchers (atexit runs
handlers last registered first).
"""

import atexit
import threading
import weakref

__all__ = ["INTERVAL_S", "Watcher"]

# How often the watcher looks at the tasks.
INTERVAL_S = 0.1

_LIVE = weakref.WeakSet()


@atexit.register
def _stop_live_watchers():
    for watcher in list(_LIVE):
        watcher.stop()


class Watcher:
    """Calls `notice()` under `lock` (when free) and pumps `streamer` (or None)."""

    def __init__(self, lock, notice, streamer):
        self._lock = lock
        self._notice = notice
        self._streamer = streamer
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="local_cluster watcher", daemon=True)
        _LIVE.add(self)
        self._thread.start()

    def stop(self):
        """Stops the thread (from any thread, its own too), then streams what is left."""
        self._stopping.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        _LIVE.discard(self)
        if self._streamer is not None:
            self._streamer.pump(final=True)

    def _watch(self):
        while not self._stopping.wait(INTERVAL_S):
            if self._streamer is not None:
                self._streamer.pump()
            if self._lock.acquire(blocking=False):  # Else a run or a start is on.
                try:
                    if not self._stopping.is_set():
                        self._notice()
                finally:
                    self._lock.release()
