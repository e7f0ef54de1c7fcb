"""Free 127.0.0.1 ports for the tasks' gRPC servers."""

import socket
import threading

from compat_distribute.testing.cluster.errors import ClusterError

# The harness's own (not public: docs/design.md says which names are).
__all__ = ["PortPicker", "pick_unused_port"]

# A port taken between picking and binding is retried this many times.
PORT_CLASH_RETRIES = 3
# Texts TF logs when its gRPC server cannot bind the port in TF_CONFIG.
PORT_CLASH_MARKERS = ("Could not start gRPC server", "Failed to add port to server")


class PortPicker:
    """Hands out free 127.0.0.1 ports, never the same port twice per process.

    The OS picks a free port (bind to port 0); the registry keeps a port handed
    to one cluster from going to another one before its server binds it. A port
    can still be taken by another program between picking and binding: the
    cluster detects TF's bind failure and retries with new ports.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._handed_out = set()

    def pick(self) -> int:
        with self._lock:
            for _ in range(100):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                if port not in self._handed_out:
                    self._handed_out.add(port)
                    return port
        raise ClusterError(
            "could not find a free 127.0.0.1 port that was not already handed out in 100 tries."
        )


_PORTS = PortPicker()


def pick_unused_port() -> int:
    """A free port on 127.0.0.1 that this process has not handed out before."""
    return _PORTS.pick()


def pick_ports(count):
    return [pick_unused_port() for _ in range(count)]


def mentions_port_clash(text):
    """Whether TF's output or error `text` says its server could not bind."""
    return any(marker in text for marker in PORT_CLASH_MARKERS)
