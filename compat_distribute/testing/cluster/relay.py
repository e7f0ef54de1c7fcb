"""The relay between a client in this process and servers in a private network (internal).

Both ends live here. TensorFlow's servers listen on 0.0.0.0 (see `netns`), so
a `netns.PrivateNetwork` keeps them in a namespace of their own, and a client
here reaches them through the relay: `listen` binds one socket per server on
this process's 127.0.0.1, and `spec` launches the relay into the namespace
with those sockets; it accepts on them and connects each connection to
127.0.0.1 at the same port inside, where the server listens. One cluster spec
(127.0.0.1 addresses) holds on both sides, and nothing listens on any other
address of the machine.

The servers also call the client back (its own server, "localhost:P"): once
told the port (`forward_to_client`), the relay listens on 127.0.0.1:P inside
and connects each connection out through a socket made here and handed over
(a socket connects in the network it was made in).

`main` (run by `bootstrap`, `--forward FD:PORT` per server) accepts on a
thread per listening socket and moves each connection's bytes on a thread per
direction (gRPC keeps few, long-lived connections); it says `Ready`, then
serves until `Exit` or until the launcher's end of the connection closes.
"""

import argparse
import collections
import os
import socket
import sys
import threading

from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import task as task_lib
from compat_distribute.testing.cluster.errors import ClusterError

__all__ = ["NAME", "POOL_MAX", "forward_to_client", "listen", "main", "spec"]

# The relay's name in reports and errors.
NAME = "relay"
# Sockets handed to the relay per server each time the client's server is
# named: a server keeps one connection to it, and makes another after a failure.
_CLIENT_SOCKETS_PER_SERVER = 2

# Sockets of the client's network the relay keeps per port, at most.
POOL_MAX = 64
# Bytes moved per read: a gRPC frame is at most 16 KiB by default; tensors
# arrive as many frames back to back.
_CHUNK = 256 * 1024


# -- This process's end ----------------------------------------------------------


def listen(ports):
    """Listening sockets on this process's 127.0.0.1, one per server, at
    `ports` (0: any): bound here so that no other program takes the ports
    (inside the fresh namespace every port is free)."""
    listeners = []
    try:
        for port in ports:
            listener = socket.socket()
            listeners.append(listener)
            try:
                listener.bind(("127.0.0.1", port))
            except OSError as e:
                raise ClusterError(
                    f"local_cluster: the relay's listening socket for 127.0.0.1:{port} "
                    f"could not bind: {e}. Pick a free port (or let the cluster pick)."
                ) from None
            listener.listen(socket.SOMAXCONN)
    except BaseException:
        for listener in listeners:
            listener.close()
        raise
    return listeners


def spec(listeners, env):
    """The relay's `TaskSpec`: it inherits `listeners`; `env(name)`: its environment."""
    forwards = [
        flag
        for listener in listeners
        for flag in ("--forward", f"{listener.fileno()}:{listener.getsockname()[1]}")
    ]
    return task_lib.TaskSpec(
        NAME,
        0,
        __name__,
        tuple(forwards),
        env(NAME),
        pass_fds=tuple(listener.fileno() for listener in listeners),
        label=NAME,
    )


def forward_to_client(conn, port, servers):
    """Has the relay on `conn` let `servers` servers reach 127.0.0.1:`port` here."""
    sockets = [socket.socket() for _ in range(_CLIENT_SOCKETS_PER_SERVER * servers)]
    try:
        conn.send(protocol.Forward(port, len(sockets)))
        with socket.socket(fileno=os.dup(conn.fileno())) as carrier:
            socket.send_fds(carrier, [b"s"], [s.fileno() for s in sockets])
    finally:
        for s in sockets:  # The relay has its own copies.
            s.close()


# -- The relay's end ---------------------------------------------------------------


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
