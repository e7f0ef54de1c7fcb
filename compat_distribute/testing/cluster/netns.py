"""How a launch's tasks get their network: the one seam the launcher holds (internal).

TensorFlow's gRPC server binds 0.0.0.0 whatever TF_CONFIG says
(`GrpcServer::Init` in grpc_server_lib.cc), so a test's servers would be
reachable from the network, and they run any graph sent to them. A launch
therefore runs its tasks in a `PrivateNetwork`: a network namespace (Linux)
whose only interface is its own loopback, made by `unshare --net` (root) or
`unshare --user --map-root-user --net` (user namespaces), held by descriptors
of this process and entered by each task with `nsenter`; it goes with its last
task. A client in this process reaches servers inside through the relay (see
`relay`). `HostNetwork` is this process's network (`network="host"`, or
"auto" where no namespace can be made, with a warning saying why).

The launcher asks `open(name)` for one object per launch and nothing else
knows which it got: `enter(argv, pass_fds)` for each process it starts,
`reach_servers` / `forward_to_client` for a client here, `close()`.
"""

import contextlib
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
from compat_distribute.testing.cluster import ports as ports_lib
from compat_distribute.testing.cluster import relay
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster.errors import ClusterError

__all__ = [
    "HostNetwork",
    "NETWORKS",
    "PrivateNetwork",
    "check",
    "choose",
    "open_network",
    "probe",
    "support",
]

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


class HostNetwork:
    """This process's network: the tasks' servers listen on all its interfaces."""

    name = "host"
    fds = ()

    def enter(self, argv, pass_fds=()):
        """(argv, pass_fds) that start a process in this network: unchanged."""
        return list(argv), tuple(pass_fds)

    def close(self):
        pass

    @contextlib.contextmanager
    def reach_servers(self, count, pick_ports, env):
        """([port, ...], helper specs) for `count` servers that this process
        reaches at 127.0.0.1:port: here, directly, at the ports picked."""
        del env
        yield (pick_ports or ports_lib.pick_ports)(count), []

    def forward_to_client(self, port, helpers, count):
        """Nothing to do: the servers reach this process's 127.0.0.1:`port` directly."""
        del port, helpers, count


class PrivateNetwork:
    """A network namespace with only its loopback up, held by open descriptors.

    No process stays behind to hold it: the process that made it exits once
    this one has opened its /proc/PID/ns files; the namespace lives while those
    descriptors are open or a task is inside, and goes with the last of them.
    """

    name = "private"

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

    def enter(self, argv, pass_fds=()):
        """(argv, pass_fds) that start `argv` inside the namespace (nsenter
        execs it: the pid stays the command's own)."""
        prefix = [self._nsenter]
        if self._user:
            prefix += [f"--user=/proc/self/fd/{self._fds['user']}", "--preserve-credentials"]
        prefix += [f"--net=/proc/self/fd/{self._fds['net']}", "--"]
        return prefix + list(argv), tuple(pass_fds) + self.fds

    def close(self):
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    @contextlib.contextmanager
    def reach_servers(self, count, pick_ports, env):
        """([port, ...], [relay spec]) for `count` servers inside that this
        process reaches at 127.0.0.1:port through the relay (see `relay`)."""
        listeners = relay.listen(pick_ports(count) if pick_ports else [0] * count)
        try:
            yield [listener.getsockname()[1] for listener in listeners], [
                relay.spec(listeners, env)
            ]
        finally:
            for listener in listeners:  # The relay has its own copies.
                listener.close()

    def forward_to_client(self, port, helpers, count):
        """Lets `count` servers inside reach this process's 127.0.0.1:`port`."""
        relay.forward_to_client(helpers[0].conn, port, count)


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
            argv, pass_fds = network.enter([sys.executable, "-I", "-S", "-c", ""])
            entered = subprocess.run(
                argv,
                pass_fds=pass_fds,
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


def open_network(name):
    """The network of one launch: a new `PrivateNetwork` for "private" (or
    ClusterError saying why none can be made here), `HostNetwork` for "host"."""
    if name == "host":
        return HostNetwork()
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
