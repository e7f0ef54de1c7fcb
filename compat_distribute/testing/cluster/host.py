"""`LocalServers`: tasks that each host a `tf.distribute.Server`, for a client here.

The tasks of a `LocalCluster` run functions sent to them; these run the
`server` main instead, and this process connects to them as a client
(`tf.config.experimental_connect_to_cluster`): the hosts of a fake TPU pod.
Start-up, its timeout and stack dumps, teardown (each task asked to exit, then
its process group killed, its temp dir removed; tasks die with this process)
are `LocalCluster`'s. The servers share this process's network, the only one
from which it can reach them; their addresses are 127.0.0.1.
"""

import dataclasses

from compat_distribute.testing.cluster import report
from compat_distribute.testing.cluster.errors import ClusterTaskError
from compat_distribute.testing.cluster.lifecycle import LocalCluster

_SERVER_MAIN = "compat_distribute.testing.cluster.server"


class LocalServers(LocalCluster):
    """`num_hosts` "worker" tasks, each a gRPC server with `devices_per_host` CPUs.

    `start()` returns once every server listens; `cluster_spec` then names
    their 127.0.0.1 addresses. `check()` raises for a host that died.
    """

    def __init__(self, num_hosts, *, devices_per_host, start_timeout=120, env=None, hooks=None):
        super().__init__(
            num_hosts,
            devices_per_worker=devices_per_host,
            timeout=start_timeout,
            start_timeout=start_timeout,
            env=env,
            network="host",
            hooks=hooks,
        )

    def _task_spec(self, task_type, task_id):
        return dataclasses.replace(super()._task_spec(task_type, task_id), main=_SERVER_MAIN)

    def run(self, fn, /, *args, **kwargs):
        raise TypeError(
            "LocalServers' tasks serve TensorFlow clients and run no Python functions; "
            "connect with tf.config.experimental_connect_to_cluster(...), or use "
            "local_cluster(...).run(fn) to run a function in every task."
        )

    def faults(self):
        """[(task id, what happened)] for each task that died or is stopped.

        A stopped task (SIGSTOP, a debugger) is killed: a client's calls to it
        would wait forever, and fail once it is gone.
        """
        found = []
        for task in self._tasks:
            code = task.exitcode()
            if code is None and task.stopped():
                task.kill()
                what = "was stopped (SIGSTOP or a debugger), so it was killed"
            elif code is not None:
                what = report.exit_reason(code)
            else:
                continue
            found.append((task.task_id, f"{task.name}, pid {task.pid}, {what}"))
        return found

    def check(self):
        """Raises `ClusterTaskError` naming the first host that died."""
        for task in self._tasks:
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
