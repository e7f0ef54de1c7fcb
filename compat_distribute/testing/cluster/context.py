"""What a function run by `LocalCluster.run` asks about its own task.

`worker.main` enters the task once at start-up (`enter`); `current_task` and
`worker_strategy` then answer inside that process, and refuse anywhere else.
While the worker imports the module of a function it is asked to run
(`importing`), starting processes is refused (`check_can_launch`): that is a
script's top level running again in the task, which would start clusters
without end.
"""

import contextlib

from compat_distribute import _validate
from compat_distribute._tf_config import TFConfig
from compat_distribute.testing.cluster import sigterm

# Public: current_task and worker_strategy. enter, keep, importing and
# check_can_launch are internal (the worker's main and the launcher call them).
__all__ = ["current_task", "worker_strategy"]

_task_config: TFConfig | None = None
_strategies: dict = {}
_kept = []  # What lives as long as the task: its server, when it serves.
_importing: str | None = None  # "module:qualname" whose module is being imported.


def enter(config: TFConfig):
    """Marks this process as the task `config` names (called by `worker.main`)."""
    global _task_config
    _task_config = config


def keep(thing):
    """Keeps `thing` (the task's tf.distribute.Server) alive with the task."""
    _kept.append(thing)


@contextlib.contextmanager
def importing(function):
    """While the worker imports the module of `function` ("module:qualname")."""
    global _importing
    _importing, before = function, _importing
    try:
        yield
    finally:
        _importing = before


def check_can_launch():
    """Raises RuntimeError when this task is importing a function's module
    (see the module): the message names the `__main__` guard."""
    if _importing is None:
        return
    module = _importing.partition(":")[0]
    task = " ".join(str(part) for part in current_task())
    raise RuntimeError(
        f"local_cluster: {task} imported the module {module!r} to run {_importing}, and "
        f"that module's top level started processes again (a local_cluster or a fake TPU "
        f"pod). Each task imports the module of the function it runs, as multiprocessing "
        f"does, so a script's top-level code runs again in every task. Put the code that "
        f'starts the cluster under `if __name__ == "__main__":` at the bottom of the script, '
        f"and keep the functions the tasks run at the top level above it."
    )


def current_task() -> tuple[str, int]:
    """(task_type, task_id) of this worker process, e.g. ("worker", 1)."""
    if _task_config is None:
        raise RuntimeError(
            "current_task() is for functions run by LocalCluster.run inside a "
            "worker process; this process is not a local_cluster task."
        )
    return _task_config.task_type, _task_config.task_id


_FACTORY_HELP = (
    "Pass None for tf.distribute.MultiWorkerMirroredStrategy, or a callable that "
    "takes no arguments and returns a strategy, such as the class "
    "compat_distribute.MultiWorkerMirroredStrategy (the class itself, not an "
    "instance or its name)."
)


def _check_factory(factory):
    if factory is None or callable(factory):
        return
    raise TypeError(
        f"factory must be None or a zero-argument callable that builds a "
        f"tf.distribute strategy; got {_validate.show(factory)}. {_FACTORY_HELP}"
    )


def _check_built(factory, strategy):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if not isinstance(strategy, (tf.distribute.Strategy, tf.compat.v1.distribute.Strategy)):
        name = getattr(factory, "__qualname__", None) or repr(factory)
        raise TypeError(
            f"factory {name} returned {_validate.show(strategy)}, not a tf.distribute "
            f"strategy; worker_strategy caches and returns what the factory builds. "
            f"{_FACTORY_HELP}"
        )


def worker_strategy(factory=None):
    """This worker's multi-worker strategy, built on first use and cached.

    Call it inside functions given to `LocalCluster.run`: the strategy must be
    built before any other op in the worker, and builds its gRPC server once.

    Args:
        factory: zero-argument callable that builds the strategy; default
            `tf.distribute.MultiWorkerMirroredStrategy`. Each factory is called
            once per worker process; later calls return the same object, so
            every `run` on a cluster shares one strategy. Every task must ask
            for the same factories in the same order (collectives pair up by
            key, and keys are handed out in build order).
    """
    _check_factory(factory)
    current_task()  # Raises outside a worker.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from compat_distribute.testing import _tf  # pylint: disable=g-import-not-at-top

    if factory is None:
        factory = tf.distribute.MultiWorkerMirroredStrategy
    if factory not in _strategies:
        # Every strategy of a process would otherwise number its collectives
        # from the same class-level base and reuse the others' keys.
        _tf.give_next_multi_worker_strategies_own_keys()
        strategy = factory()
        sigterm.reclaim()  # Building it gave SIGTERM to TensorFlow's preemption notifier.
        _check_built(factory, strategy)
        _strategies[factory] = strategy
    return _strategies[factory]
