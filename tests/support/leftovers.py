"""What a launch may leave on the machine besides processes: temp directories, listening sockets."""

import os
import tempfile


def cluster_dirs(directory=None):
    """This process's cluster directories in `directory` (default: the temp dir)."""
    directory = directory or tempfile.gettempdir()
    mine = f"local_cluster-{os.getpid()}."
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.startswith(mine))


def listening(ports, pid="self"):
    """{port: [local address, ...]} of the TCP sockets listening on `ports` in
    the network namespace of process `pid` (default: this one's, which is
    what the machine's interfaces offer)."""
    found = {}
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in list(f)[1:]:
                fields = line.split()
                address, port = fields[1].split(":")
                if fields[3] == "0A" and int(port, 16) in ports:  # TCP_LISTEN
                    if len(address) == 8:  # IPv4, little-endian
                        address = ".".join(str(b) for b in reversed(bytes.fromhex(address)))
                    found.setdefault(int(port, 16), []).append(address)
    return found
