"""Private network namespaces: each cluster's servers reachable by its tasks alone.

Internal: not part of the public API; the names below may change.

The cluster spec names 127.0.0.1 only, but TensorFlow's gRPC server
has no bind-address option: `GrpcServer::Init` in
tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc calls
`builder.AddListeningPort("0.0.0.0:" + std::to_string(requested_port), ...)`,
so every task would listen on every interface of the machine. With
`network="private"` all tasks of a cluster run in one network namespace of
their own (Linux), whose only interface is its own loopback: their servers
are reachable from the tasks of that cluster and from nothing else, this
process included (it drives the tasks over socketpairs, which cross
namespaces). Tasks then have no network beyond that loopback. The namespace is
made by `unshare --net` (root) or `unshare --user --map-root-user --net`
(unprivileged, where user namespaces are enabled; the tasks then see their uid
as 0 in that user namespace, with no more rights on the host than the caller),
held by file descriptors of this process, and entered by each task with
`nsenter`; it disappears with the last task once the cluster stops.
`network="auto"` (the default) is private where that works and otherwise host, with a warning saying why;
`network="host"` runs the tasks in this process's namespace. A process that
must itself reach the servers (a pod's client) does so through a relay (see
`relay`), which `host.LocalServers` launches into the namespace.
"""

import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import warnings

from compat_distribute import _validate
from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster.errors import ClusterError

__all__ = ["NETWORKS", "PrivateNetwork", "check", "choose", "make", "probe", "support"]

# How long the namespace's maker may take to exit once told to.
_MAKER_EXIT_S = 2.0
NETWORKS = ("private", "host", "auto")
# How long making a namespace (or the probe for one) may take (scaled).
_NAMESPACE_TIMEOUT_S = 10.0
# Runs as the first process of a new network namespace: brings its loopback up
# (SIOCSIFFLAGS, so `ip` need not be installed), checks that 127.0.0.1 answers,
# says "up", and lives until its stdin closes so its namespace can be opened.
_LOOPBACK_UP = """\
import fcntl, socket, struct, sys
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"  # struct ifreq: interface name, then ifr_flags.
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    got = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0))
    flags = struct.unpack(IFREQ, got)[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))
with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    socket.create_connection(server.getsockname(), timeout=5).close()
sys.stdout.write("up\\n")
sys.stdout.flush()
sys.stdin.read()
"""


class PrivateNetwork:
    """A network namespace with only its loopback up, held by open descriptors.

    No process stays behind to hold it: the process that made it exits once
    this one has opened its /proc/PID/ns files; the namespace lives while those
    descriptors are open or a task is inside, and goes with the last of them.
    """

    def __init__(self, unshare, nsenter, user):
        self._nsenter = nsenter
        self._user = user
        kinds = ("user", "net") if user else ("net",)
        command = [unshare, *(["--user", "--map-root-user"] if user else []), "--net"]
        self.how = " ".join([os.path.basename(unshare)] + command[1:])
        self._fds = {}
        maker = subprocess.Popen(
            command + ["--", sys.executable, "-I", "-S", "-c", _LOOPBACK_UP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        said = b""
        try:
            if select.select([maker.stdout], [], [], deadlines.scaled(_NAMESPACE_TIMEOUT_S))[0]:
                said = maker.stdout.readline()
            if said == b"up\n":
                for kind in kinds:
                    self._fds[kind] = os.open(f"/proc/{maker.pid}/ns/{kind}", os.O_RDONLY)
        except BaseException:
            self.close()
            raise
        finally:
            maker.stdin.close()  # Lets it exit.
            if not self._fds:
                os.kill(maker.pid, signal.SIGKILL)  # Not reaped yet: still ours.
            try:
                code = maker.wait(timeout=_MAKER_EXIT_S)
            except subprocess.TimeoutExpired:
                os.kill(maker.pid, signal.SIGKILL)
                code = maker.wait()
            errors = maker.stderr.read().decode("utf-8", "replace").strip().splitlines()
            maker.stdout.close()
            maker.stderr.close()
        if not self._fds:
            why = (
                report.exit_reason(code)
                if said or code != -signal.SIGKILL
                else "did not bring up its loopback within "
                + deadlines.describe(_NAMESPACE_TIMEOUT_S)
            )
            raise ClusterError(f"`{self.how}` {why}: {errors[-1] if errors else '(no output)'}")

    @property
    def fds(self):
        """Descriptors a task must inherit to enter the namespace."""
        return tuple(self._fds.values())

    def enter(self, command):
        """`command` prefixed to run inside the namespace (nsenter execs it:
        the pid stays the command's own)."""
        prefix = [self._nsenter]
        if self._user:
            prefix += [f"--user=/proc/self/fd/{self._fds['user']}", "--preserve-credentials"]
        return prefix + [f"--net=/proc/self/fd/{self._fds['net']}", "--"] + list(command)

    def close(self):
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


def probe():
    """(unshare, nsenter, user) that make and enter a private network here, or
    a str saying why none can be made."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are a Linux feature and this is {sys.platform}"
    tools = {name: shutil.which(name) for name in ("unshare", "nsenter")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        return f"{' and '.join(missing)} (util-linux) not found on PATH"
    failures = []
    for user in (False, True):  # As root, or in a user namespace of our own.
        try:
            network = PrivateNetwork(tools["unshare"], tools["nsenter"], user)
        except (ClusterError, OSError) as e:
            failures.append(str(e))
            continue
        try:
            entered = subprocess.run(
                network.enter([sys.executable, "-I", "-S", "-c", ""]),
                pass_fds=network.fds,
                capture_output=True,
                timeout=deadlines.scaled(_NAMESPACE_TIMEOUT_S),
            )
        except (subprocess.TimeoutExpired, OSError) as e:
            failures.append(f"nsenter into `{network.how}` failed: {e}")
            continue
        finally:
            network.close()
        if entered.returncode == 0:
            return tools["unshare"], tools["nsenter"], user
        failures.append(
            f"nsenter into `{network.how}` {report.exit_reason(entered.returncode)}: "
            f"{entered.stderr.decode('utf-8', 'replace').strip() or '(no output)'}"
        )
    return "; ".join(failures)


_PRIVATE_NETWORK_SUPPORT = None  # The probe's answer, once per process.
_PRIVATE_NETWORK_LOCK = threading.Lock()


def support():
    global _PRIVATE_NETWORK_SUPPORT
    with _PRIVATE_NETWORK_LOCK:
        if _PRIVATE_NETWORK_SUPPORT is None:
            _PRIVATE_NETWORK_SUPPORT = probe()
        return _PRIVATE_NETWORK_SUPPORT


def check(network):
    if not isinstance(network, str) or network not in NETWORKS:
        raise ValueError(
            f"network must be one of {', '.join(repr(n) for n in NETWORKS)}; got "
            f"{_validate.show(network)}. 'private' keeps the tasks' servers off the host's "
            f"interfaces, 'host' shares this process's network, 'auto' picks private "
            f"where the platform allows it."
        )
    return network


def choose(
    network,
    *,
    who="local_cluster(network='auto') runs its tasks",
    opt_out="Pass network='host'",
):
    """"private" or "host" for `network`; "auto" probes once per process and
    warns (RuntimeWarning: "{who} on the host network ... {opt_out} to accept
    that") when it falls back to "host"."""
    if network != "auto":
        return network
    answer = support()
    if not isinstance(answer, str):
        return "private"
    warnings.warn(
        f"{who} on the host network: "
        f"no private network namespace here ({answer}). Their gRPC servers "
        f"listen on all interfaces, since TensorFlow binds 0.0.0.0. {opt_out} "
        f"to accept that without this warning.",
        RuntimeWarning,
        stacklevel=3,
    )
    return "host"


def make():
    """A new PrivateNetwork, or ClusterError saying why none can be made here."""
    answer = support()
    if isinstance(answer, str):
        raise ClusterError(
            f"local_cluster(network='private') cannot make a private network "
            f"namespace here: {answer}. As root this needs `unshare --net`; "
            f"unprivileged, user namespaces (sysctls user.max_user_namespaces > 0, "
            f"kernel.unprivileged_userns_clone=1 where it exists, "
            f"kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04+). "
            f"Or pass network='host' (servers on all interfaces)."
        )
    return PrivateNetwork(*answer)
