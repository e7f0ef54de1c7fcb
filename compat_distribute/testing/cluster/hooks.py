"""A documented way for tests to inject faults into a cluster's launches."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class LaunchHooks:
    """Where tests may step into a cluster's launches (fault injection).

    Give one to `local_cluster(..., hooks=LaunchHooks(...))`:

    pick_ports: `(count) -> [port, ...]` replaces the cluster's free-port
        picking for each launch (e.g. hand out a port that is taken, to see the
        cluster retry with fresh ports).
    command: `(spec, argv) -> argv` replaces a task's command line before it
        starts (e.g. a process that never joins, to see start-up time out);
        `spec` is the `TaskSpec` with `.name`, `.task_type`, `.task_id`.
    on_launch: `(task name, pid)` is called for every process launched,
        including those of launches that later fail.
    """

    pick_ports: object = None
    command: object = None
    on_launch: object = None

