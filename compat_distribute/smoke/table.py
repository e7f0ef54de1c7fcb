"""The table of smoke checks, run in this order: a new check is one row here.

No TensorFlow, so `--help` and usage errors answer at once.
"""

import dataclasses

from compat_distribute import _lazy
from compat_distribute.testing._fake_tpu import topologies as topologies_lib

__all__ = ["CHECKS", "Check", "topologies"]

_CHECKS = "compat_distribute.smoke.checks"


@dataclasses.dataclass(frozen=True)
class Check:
    name: str  # for --inject-failure and the report
    fn: object  # fn(target, measured) -> one-line detail; or its "module:function" path
    what: str  # for --help

    def run(self, target, measured):
        fn = _lazy.load(self.fn) if isinstance(self.fn, str) else self.fn
        return fn(target, measured)


CHECKS = (
    Check("replicas", f"{_CHECKS}:check_replicas", "replica count matches the hardware"),
    Check(
        "per_replica_values",
        f"{_CHECKS}:check_per_replica_values",
        "each replica returns its own value",
    ),
    Check(
        "all_reduce",
        f"{_CHECKS}:check_all_reduce",
        "all-reduce and reduce give a known sum and mean",
    ),
    Check(
        "run_steps",
        f"{_CHECKS}:check_run_steps",
        "on-device loops advance a counter by steps_per_run",
    ),
    Check("logical_devices", f"{_CHECKS}:check_logical_devices", "split_to_logical_devices"),
    Check(
        "dataset",
        f"{_CHECKS}:check_dataset",
        "per-replica batch sizes from make_dataset_iterator",
    ),
    Check(
        "checkpoint",
        f"{_CHECKS}:check_checkpoint",
        "tf.train.Checkpoint round trip, bit-identical",
    ),
    Check("training", f"{_CHECKS}:check_training", "a tiny model's loss falls; steps per second"),
)


def topologies():
    """The fake TPU's preset names, pods included: the choices of `--topology`."""
    return tuple(topologies_lib.PRESETS)
