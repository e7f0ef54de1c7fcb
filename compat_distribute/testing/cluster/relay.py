"""The main of the relay between a client and servers in a private network.

Internal: not part of the public API; the names below may change.

TensorFlow's servers listen on 0.0.0.0 (see `netns`), so `LocalServers` keeps
them in a private network namespace, where that means its own loopback, and
its client (the parent process, outside) reaches them through this relay: the
parent binds one listening socket per server on its own 127.0.0.1, at the
server's port, and launches the relay as a task inside the namespace, handing
it those sockets. The relay accepts on them and connects each connection to
127.0.0.1 at the same port inside, where the server listens; the servers reach
each other directly. So one cluster spec (127.0.0.1 addresses) holds on both
sides, and nothing listens on any other address of the machine.

The servers also call the client back (its own server, "localhost:P", which
TensorFlow starts when the client connects): once told the port (`Forward`),
the relay listens on 127.0.0.1:P inside and connects each connection out
through a socket the parent made in its own network and handed over (a socket
connects in the network it was made in; the relay cannot make one there).

`main` (started by `bootstrap`, `--forward FD:PORT` per server) accepts
on a thread per listening socket and moves each connection's bytes on a thread
per direction (gRPC keeps few, long-lived connections); it says `Ready`, then
serves until `Exit` or until the launcher's end of the connection closes.
"""

import argparse
import collections
import os
import socket
import sys
import threading

from compat_distribute.testing.cluster import protocol

__all__ = ["POOL_MAX", "forward_flag", "main"]

# Sockets of the client's network the relay keeps per port, at most.
POOL_MAX = 64
# Bytes moved per read: a gRPC frame is at most 16 KiB by default; tensors
# arrive as many frames back to back.
_CHUNK = 256 * 1024


def forward_flag(listener, port):
    """The `--forward` argument that hands `listener` (inherited) to the relay."""
    return f"{listener.fileno()}:{port}"


class _Link:
    """One client connection and its connection to the server."""

    def __init__(self, outside, inside):
        self._sockets = (outside, inside)
        self._open_directions = 2
        self._lock = threading.Lock()
        for s in self._sockets:
            # Frames go on at once: Nagle's delay would add to every step.
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def start(self):
        outside, inside = self._sockets
        for source, sink in ((outside, inside), (inside, outside)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source, sink):
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        try:
            while size := source.recv_into(buffer):
                sink.sendall(view[:size])
            sink.shutdown(socket.SHUT_WR)  # Passes the end of this direction on.
        except OSError:  # Reset by either end: both directions end.
            for s in self._sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        finally:
            with self._lock:
                self._open_directions -= 1
                last = self._open_directions == 0
            if last:  # The last direction out closes the sockets.
                for s in self._sockets:
                    s.close()


def _accept(listener, port, connect):
    """Accepts on `listener` (for `port`); `connect(port)` returns the socket
    connected to the server on the other side, or None."""
    while True:
        try:
            accepted, _ = listener.accept()
        except OSError as e:
            # No one could reach that server any more: end, to be named.
            print(f"relay: accepting on 127.0.0.1:{port} failed: {e}", file=sys.stderr, flush=True)
            os._exit(1)
        try:
            other = connect(port)
        except OSError:
            other = None
        if other is None:  # The server is gone: the caller sees its connection close.
            accepted.close()
            continue
        _Link(accepted, other).start()


def _connect_inside(port):
    return socket.create_connection(("127.0.0.1", port))


class _ClientSockets:
    """Unconnected sockets of the client's network, per port of the client."""

    def __init__(self):
        self._pools = collections.defaultdict(list)
        self._lock = threading.Lock()

    def add(self, port, sockets):
        """Adds `sockets`; True when `port` is new."""
        with self._lock:
            new = port not in self._pools
            pool = self._pools[port]
            pool.extend(sockets)
            while len(pool) > POOL_MAX:
                pool.pop(0).close()
        return new

    def connect(self, port):
        with self._lock:
            pool = self._pools[port]
            outside = pool.pop() if pool else None
        if outside is None:
            print(
                f"relay: no socket left to reach the client's 127.0.0.1:{port}; a host's "
                f"connection to it was closed.",
                file=sys.stderr,
                flush=True,
            )
            return None
        outside.connect(("127.0.0.1", port))
        return outside


def _serve(listener, port, connect):
    threading.Thread(
        target=_accept, args=(listener, port, connect), name=f"relay :{port}", daemon=True
    ).start()


def main(argv, conn):
    """Relays until told to exit; returns the exit status."""
    parser = argparse.ArgumentParser(prog="local_cluster relay")
    parser.add_argument("--forward", action="append", default=[], metavar="FD:PORT")
    flags = parser.parse_args(argv)
    for forward in flags.forward:
        fd, port = (int(part) for part in forward.split(":"))
        _serve(socket.socket(fileno=fd), port, _connect_inside)
    client_sockets = _ClientSockets()
    carrier = socket.socket(fileno=os.dup(conn.fileno()))  # Carries the sockets.
    conn.send(protocol.Ready(os.getpid()))
    try:
        while True:
            message = conn.recv()
            if isinstance(message, protocol.Exit):
                break
            _, fds, _, _ = socket.recv_fds(carrier, 1, message.sockets)
            sockets = [socket.socket(fileno=fd) for fd in fds]
            if client_sockets.add(message.port, sockets):
                listener = socket.create_server(("127.0.0.1", message.port))
                _serve(listener, message.port, client_sockets.connect)
    except EOFError:  # The launcher went away.
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
