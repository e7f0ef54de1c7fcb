"""Where each worker of a strategy writes its checkpoints.

Every worker must `save`, but only the chief's files are the checkpoint: the
others write to a temporary directory (`checkpoint_dir`).
"""

import contextlib
import os
import shutil
import tempfile

from compat_distribute import _validate

__all__ = ("checkpoint_dir", "checkpoint_dir_for", "is_chief")

_STRATEGY_HINT = "Pass the strategy that saves the checkpoint."


def is_chief(strategy):
    """Whether this process writes the real checkpoint (TF's `should_checkpoint`)."""
    _validate.strategy(strategy, hint=_STRATEGY_HINT)
    return _is_chief(strategy)


def _is_chief(strategy):
    return bool(strategy.extended.should_checkpoint)


def _task(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None) or "worker"
    task_id = getattr(resolver, "task_id", None) or 0
    return task_type, task_id


def checkpoint_dir_for(strategy, path):
    """`path` on the chief; a new temporary directory on every other worker.

    The temporary directory is outside `path`, so the real checkpoint
    directory holds only the chief's files. Delete it when done (or use
    `checkpoint_dir`, which does).
    """
    _validate.strategy(strategy, hint=_STRATEGY_HINT)
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise (ValueError if isinstance(path, str) else TypeError)(
            f"path must be a directory name (a non-empty str or os.PathLike); got "
            f"{_validate.show(path)}. Pass the checkpoint directory, e.g. "
            f"'/tmp/ckpts/run1'; on workers other than the chief a temporary "
            f"directory is returned instead."
        )
    if _is_chief(strategy):
        return os.fspath(path)
    task_type, task_id = _task(strategy)
    return tempfile.mkdtemp(prefix=f"compat_distribute_ckpt_{task_type}{task_id}_")


@contextlib.contextmanager
def checkpoint_dir(strategy, path):
    """`checkpoint_dir_for(strategy, path)` for a block; a temporary one is deleted after."""
    directory = checkpoint_dir_for(strategy, path)
    try:
        yield directory
    finally:
        if directory != os.fspath(path):
            shutil.rmtree(directory, ignore_errors=True)
