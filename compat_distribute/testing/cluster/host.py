"""`LocalServers`: tasks that each host a `tf.distribute.Server`, for a client here.

The tasks of a `LocalCluster` run functions sent to them; these run the
`server` main instead, and this process connects to them as a client
(`tf.config.experimental_connect_to_cluster`): the hosts of a fake TPU pod.
Start-up, its timeout and stack dumps, teardown (each task asked to exit,
then SIGTERM, then SIGKILL to its process group, its temp dir removed; tasks
die with this process) are `LocalCluster`'s.

TensorFlow's servers listen on 0.0.0.0, so with network="private" they run in
a private network namespace and this process reaches them through a relay
(see `relay`): it holds a listening socket on 127.0.0.1 at each server's port
until the relay, launched with the servers into the namespace, takes them
over. Nothing listens on any other address of the machine. network="host"
runs the servers in this process's network, on all its interfaces.
"""

import dataclasses
import os
import socket

from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import relay
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster import task as task_lib
from compat_distribute.testing.cluster.errors import ClusterError
from compat_distribute.testing.cluster.errors import ClusterTaskError
from compat_distribute.testing.cluster.lifecycle import LocalCluster

_SERVER_MAIN = "compat_distribute.testing.cluster.server"
# The job the servers boot as, as a Cloud TPU's servers do: clients name them
# "worker" (an eager client's cluster, or a TF1 session's cluster_def), which
# TensorFlow refuses for a session when it is the name the server booted with.
BOOT_JOB = "tpu_worker"
_RELAY_MAIN = "compat_distribute.testing.cluster.relay"
# Sockets handed to the relay per host each time the client's server is named:
# a host keeps one connection to it, and makes another after a failure.
_CLIENT_SOCKETS_PER_HOST = 2
# The relay's name in reports and errors.
RELAY = "relay"


class LocalServers(LocalCluster):
    """`num_hosts` "worker" tasks, each a gRPC server with `devices_per_host` CPUs.

    `start()` returns once every server listens; `cluster_spec` then names
    their 127.0.0.1 addresses. `check()` raises for a host (or the relay)
    that died. `network`: "private", "host" or "auto", as for `local_cluster`,
    except that "private" reaches the servers through the relay.
    """

    def __init__(
        self,
        num_hosts,
        *,
        devices_per_host,
        start_timeout=120,
        env=None,
        network="auto",
        hooks=None,
    ):
        super().__init__(
            num_hosts,
            devices_per_worker=devices_per_host,
            timeout=start_timeout,
            start_timeout=start_timeout,
            env=env,
            network=network,
            hooks=hooks,
        )
        self._listeners = []  # This process's, until the relay has them.

    @property
    def relay_pid(self):
        """The running relay's process id; None on the host network or stopped."""
        return self._helpers[0].pid if self._helpers else None

    def forward_to_client(self, port):
        """Lets the hosts reach this process's server at 127.0.0.1:`port` (the
        "localhost" job TensorFlow adds when this process connects as a client).

        On the host network they reach it directly, and this does nothing.
        """
        if not self._helpers:
            if self._private_network is None and self.running:
                return
            raise ClusterError("LocalServers is not running: call start() first.")
        sockets = [socket.socket() for _ in range(_CLIENT_SOCKETS_PER_HOST * len(self._tasks))]
        conn = self._helpers[0].conn
        try:
            conn.send(protocol.Forward(port, len(sockets)))
            with socket.socket(fileno=os.dup(conn.fileno())) as carrier:
                socket.send_fds(carrier, [b"s"], [s.fileno() for s in sockets])
        except OSError:
            self.check()  # Names the relay (or a host) that died.
            raise
        finally:
            for s in sockets:  # The relay has its own copies.
                s.close()

    def _task_spec(self, task_type, task_id):
        spec = super()._task_spec(task_type, task_id)
        argv = spec.argv + ("--boot-job", BOOT_JOB)
        return dataclasses.replace(spec, main=_SERVER_MAIN, argv=argv)

    def _pick_ports(self, count):
        if self._private_network is None:
            return super()._pick_ports(count)
        # Bound here, so that no other program takes them: inside the fresh
        # namespace every port is free.
        wanted = self._hooks.pick_ports(count) if self._hooks.pick_ports else [0] * count
        for port in wanted:
            listener = socket.socket()
            self._listeners.append(listener)
            try:
                listener.bind(("127.0.0.1", port))
            except OSError as e:
                raise ClusterError(
                    f"local_cluster: the relay's listening socket for 127.0.0.1:{port} could "
                    f"not bind: {e}. Pick a free port (or let the cluster pick)."
                ) from None
            listener.listen(socket.SOMAXCONN)
        return [listener.getsockname()[1] for listener in self._listeners]

    def _helper_specs(self):
        if not self._listeners:
            return []
        forwards = [
            flag
            for listener in self._listeners
            for flag in ("--forward", relay.forward_flag(listener, listener.getsockname()[1]))
        ]
        return [
            task_lib.TaskSpec(
                RELAY,
                0,
                _RELAY_MAIN,
                tuple(forwards),
                self._process_env(RELAY),
                pass_fds=tuple(listener.fileno() for listener in self._listeners),
                label=RELAY,
            )
        ]

    def _release_launch_resources(self):
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener.close()

    def run(self, fn, /, *args, **kwargs):
        raise TypeError(
            "LocalServers' tasks serve TensorFlow clients and run no Python functions; "
            "connect with tf.config.experimental_connect_to_cluster(...), or use "
            "local_cluster(...).run(fn) to run a function in every task."
        )

    def faults(self):
        """[(task id, what happened)] for each task that died or is stopped;
        the relay's task id is None.

        A stopped task (SIGSTOP, a debugger) is killed: a client's calls to it
        would wait forever, and fail once it is gone. Once the relay is gone
        no one can reach the hosts: they are killed too, and it alone is named.
        """
        found = []
        for task in self._helpers + self._tasks:
            code = task.exitcode()
            if code is None and task.stopped():
                task.kill()
                what = "was stopped (SIGSTOP or a debugger), so it was killed"
            elif code is not None:
                what = report.exit_reason(code)
            else:
                continue
            if task in self._helpers:
                for host in self._tasks:
                    host.kill()
                what += "; the hosts were killed, since nothing can reach them"
                return [(None, f"{task.name}, pid {task.pid}, {what}")]
            found.append((task.task_id, f"{task.name}, pid {task.pid}, {what}"))
        return found

    def check(self):
        """Raises `ClusterTaskError` naming the relay or the first host that died."""
        for task in self._helpers + self._tasks:
            code = task.exitcode()
            if code is None:
                continue
            raise ClusterTaskError(
                f"local_cluster: {task.name} (pid {task.pid}) "
                f"{report.exit_reason(code)}.\nOutput of {task.name} (last lines):\n"
                f"{report.indent(report.tail(task.output()))}",
                task_type=task.task_type,
                task_id=task.task_id,
                exitcode=code,
                output_tail=report.tail(task.output()),
            )
