"""`LocalServers`: tasks that each host a `tf.distribute.Server`, for a client here.

The tasks of a `LocalCluster` run functions sent to them; these run the
`server` main instead, and this process connects to them as a client
(`tf.config.experimental_connect_to_cluster`): the hosts of a fake TPU pod.
Start-up, stack dumps and teardown are the `launcher`'s, as for a
`LocalCluster`; how this process reaches the servers (directly, or through a
relay into a private network) is the launch's network's (see `netns`).
"""

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import checks
from compat_distribute.testing.cluster import launcher as launcher_lib
from compat_distribute.testing.cluster import netns
from compat_distribute.testing.cluster import relay
from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster import task as task_lib
from compat_distribute.testing.cluster import tf_config
from compat_distribute.testing.cluster.errors import ClusterError
from compat_distribute.testing.cluster.errors import ClusterTaskError

__all__ = ["BOOT_JOB", "LocalServers", "RELAY"]

_SERVER_MAIN = "compat_distribute.testing.cluster.server"
# The job the servers boot as, as a Cloud TPU's servers do: clients name them
# "worker" (an eager client's cluster, or a TF1 session's cluster_def), which
# TensorFlow refuses for a session when it is the name the server booted with.
BOOT_JOB = "tpu_worker"
# The relay's name in reports and errors.
RELAY = relay.NAME
# The servers' job in the cluster spec.
_JOB = "worker"


class LocalServers:
    """`num_hosts` "worker" tasks, each a gRPC server with `devices_per_host` CPUs.

    `start()` returns once every server listens; `cluster_spec` then names
    their 127.0.0.1 addresses. `check()` raises for a host (or the relay)
    that died, named as `owner`'s. `network`: "private", "host" or "auto", as
    for `local_cluster`, except that "private" reaches the servers through the
    relay. `start_timeout` scales with `deadlines`.
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
        owner="LocalServers",
    ):
        self._owner = owner
        self._num_hosts = checks.num_workers(num_hosts)
        self._devices_per_host = checks.devices_per_worker(devices_per_host)
        deadlines.scale()  # A bad $COMPAT_DISTRIBUTE_TIMEOUT_SCALE fails here.
        self._hooks = checks.hooks(hooks)
        self._launcher = launcher_lib.Launcher(
            network=netns.check(network),
            start_timeout=checks.positive_seconds("start_timeout", start_timeout),
            env=checks.env(env),
            hooks=self._hooks,
            who="local_cluster(network='auto') runs its tasks",
            opt_out="Pass network='host'",
        )
        self._cluster_spec: dict[str, tuple[str, ...]] = {}

    # -- Life cycle, as LocalCluster's -----------------------------------------

    @property
    def cluster_spec(self) -> dict[str, tuple[str, ...]]:
        """{"worker": ("127.0.0.1:port", ...)} of the running servers."""
        return dict(self._cluster_spec)

    @property
    def pids(self) -> list[int]:
        """Process ids of the running servers, in task order."""
        return self._launcher.pids

    @property
    def running(self) -> bool:
        return self._launcher.running

    @property
    def directory(self) -> str | None:
        """The running servers' temporary directory (logs, each task's TMPDIR)."""
        return self._launcher.directory

    @property
    def network(self) -> str:
        """ "private" or "host", as `LocalCluster.network`."""
        return self._launcher.network

    @property
    def relay_pid(self):
        """The running relay's process id; None on the host network or stopped."""
        helpers = self._launcher.helpers
        return helpers[0].pid if helpers else None

    @property
    def zygote_pid(self):
        """The process that forked the servers (see docs/clusters.md); None when
        they are fresh processes, or stopped."""
        return self._launcher.zygote_pid

    def start(self):
        """Launches every server (and the relay) and waits until each listens."""
        if not self.running:
            self._launch()
        return self

    def stop(self):
        """Asks every process to exit, kills their process groups, reaps them."""
        self._launcher.stop(graceful=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()

    # -- Start-up ------------------------------------------------------------

    def _task_spec(self, task_id):
        name = tf_config.task_name(_JOB, task_id)
        env = self._launcher.process_env(name)
        env["TF_CONFIG"] = tf_config.for_task(self._cluster_spec, _JOB, task_id).to_json()
        argv = ("--devices", str(self._devices_per_host), "--boot-job", BOOT_JOB)
        return task_lib.TaskSpec(_JOB, task_id, _SERVER_MAIN, argv, env)

    def _launch(self):
        with self._launcher.launching() as launcher:
            with launcher.reach_servers(self._num_hosts) as (ports, helpers):
                keys = tf_config.task_keys(self._num_hosts)
                self._cluster_spec = tf_config.cluster_spec(keys, ports)
                hosts = [self._task_spec(i) for i in range(self._num_hosts)]
                launcher.spawn(hosts, helpers)
            launcher.wait_ready()

    # -- Clients and faults --------------------------------------------------

    def forward_to_client(self, port):
        """Lets the hosts reach this process's server at 127.0.0.1:`port` (the
        "localhost" job TensorFlow adds when this process connects as a client)."""
        if not self.running:
            raise ClusterError("LocalServers is not running: call start() first.")
        try:
            self._launcher.forward_to_client(port, self._num_hosts)
        except OSError:
            self.check()  # Names the relay (or a host) that died.
            raise

    def faults(self):
        """[(task id, what happened)] for each task that died or is stopped;
        the relay's task id is None.

        A stopped task (SIGSTOP, a debugger) is killed: a client's calls to it
        would wait forever, and fail once it is gone. Once the relay is gone
        no one can reach the hosts: they are killed too, and it alone is named.
        """
        found = []
        helpers, hosts = self._launcher.helpers, self._launcher.tasks
        for task in helpers + hosts:
            code = task.exitcode()
            if code is None and task.stopped():
                task.kill()
                what = "was stopped (SIGSTOP or a debugger), so it was killed"
            elif code is not None:
                what = self._launcher.exit_reason(task, code)
            else:
                continue
            if task in helpers:
                for host in hosts:
                    host.kill()
                what += "; the hosts were killed, since nothing can reach them"
                return [(None, f"{task.name}, pid {task.pid}, {what}")]
            found.append((task.task_id, f"{task.name}, pid {task.pid}, {what}"))
        return found

    def check(self):
        """Raises `ClusterTaskError` naming the relay or the first host that died."""
        for task in self._launcher.helpers + self._launcher.tasks:
            code = task.exitcode()
            if code is None:
                continue
            raise ClusterTaskError(
                f"{self._owner}: {task.name} (pid {task.pid}) "
                f"{self._launcher.exit_reason(task, code)}.\nOutput of {task.name} (last lines):\n"
                f"{report.indent(report.tail(task.output()))}",
                task_type=task.task_type,
                task_id=task.task_id,
                exitcode=code,
                output_tail=report.tail(task.output()),
            )
