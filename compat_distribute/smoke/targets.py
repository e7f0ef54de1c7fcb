"""What the smoke runs on: a `Target` is a strategy plus what the hardware promises.

The hardware is `testing._backend`'s choice, named in its words.
"""

import dataclasses

import tensorflow as tf

from compat_distribute import multi_worker
from compat_distribute import tpu
from compat_distribute.testing import _fake_tpu

__all__ = ["Target", "target"]

# What the JSON report calls each kind of `Backend`.
_HARDWARE = {"fake": "fake_tpu", "tpu": "tpu", "gpu": "gpu"}


@dataclasses.dataclass
class Target:
    """The strategy under test and what the hardware promises about it."""

    strategy: object
    device: str  # one line for people: what runs the replicas
    replicas: int  # expected num_replicas_in_sync, known without asking the strategy
    steps_per_run: int
    # Builds (strategy, cores_per_replica) whose replicas span 2 logical
    # devices each, or None where the hardware cannot split (the check is
    # then skipped).
    split_strategy: object = None
    info: dict = dataclasses.field(default_factory=dict)  # extra JSON fields
    # The input iterators the checks made, released with the target: in
    # TensorFlow 2.21 destroying a distributed iterator can wait seconds to a
    # minute (see compat_distribute._exit), so no check destroys one mid-run.
    inputs: list = dataclasses.field(default_factory=list, repr=False)

    def keep(self, iterator):
        """Returns `iterator`, kept alive as long as this target."""
        self.inputs.append(iterator)
        return iterator


def _split_strategy(resolver, topology, steps_per_run):
    """Builds, on demand, a TPUStrategy whose replicas span two logical cores.

    `topology` is called only then (the fake's initialize_tpu_system is cheap
    but not free).
    """

    def build():
        assignment = two_cores_per_replica(topology())
        strategy = tpu.TPUStrategy(
            resolver, steps_per_run=steps_per_run, device_assignment=assignment
        )
        return strategy, 2

    return build


def two_cores_per_replica(topology):
    """A device assignment of `topology` with replicas of two adjacent cores."""
    # Two cores of one chip where chips have two (v2, v3), else two chips.
    shape = [1, 1, 1, 2] if topology.mesh_shape[-1] >= 2 else [2, 1, 1, 1]
    cores = topology.num_tasks * topology.num_tpus_per_task
    return tf.tpu.experimental.DeviceAssignment.build(
        topology, computation_shape=shape, num_replicas=cores // 2
    )


def _info(backend):
    info = {"hardware": _HARDWARE[backend.kind]}
    if backend.kind == "fake":
        info.update(topology=backend.topology, hosts=backend.hosts)
    elif backend.kind == "tpu":
        info.update(tpu=backend.tpu_name)
    return info


def target(backend, steps_per_run):
    """The `Target` of a `testing._backend.Backend`.

    A TPU (real or fake) runs `compat_distribute.TPUStrategy`; GPUs run the
    `MultiWorkerMirroredStrategy` shim (one worker). The fake's virtual devices
    are created here, so call it before TensorFlow starts.
    """
    if backend.kind == "gpu":
        return Target(
            strategy=multi_worker.MultiWorkerMirroredStrategy(),
            device=backend.describe(),
            replicas=backend.num_cores,
            steps_per_run=steps_per_run,
            info=_info(backend),
        )
    resolver = backend.make_resolver()
    if backend.is_real:
        topology = lambda: backend.tpu_topology  # pylint: disable=unnecessary-lambda-assignment
    else:
        topology = lambda: _fake_tpu.initialize_tpu_system(resolver)  # pylint: disable=unnecessary-lambda-assignment
    split = _split_strategy(resolver, topology, steps_per_run)
    return Target(
        strategy=tpu.TPUStrategy(resolver, steps_per_run=steps_per_run),
        device=backend.describe(),
        replicas=backend.num_cores,
        steps_per_run=steps_per_run,
        split_strategy=split if backend.num_cores >= 2 else None,
        info=_info(backend),
    )
