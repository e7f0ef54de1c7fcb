"""A documented way for tests to inject faults into a cluster's launches."""

import dataclasses

from compat_distribute import _validate

__all__ = ["LaunchHooks"]


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
        Every task of such a launch starts as a fresh process (no zygote).
    on_launch: `(task name, pid)` is called for every process launched,
        including those of launches that later fail, and `("zygote", pid)`
        for the process that forks a launch's tasks (docs/clusters.md).
    """

    pick_ports: object = None
    command: object = None
    on_launch: object = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None and not callable(value):
                raise TypeError(
                    f"LaunchHooks({field.name}=...) must be None or a callable; got "
                    f"{_validate.show(value)}. Pass a function with the signature "
                    f"documented on LaunchHooks, or leave {field.name} out."
                )
