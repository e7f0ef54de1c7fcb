"""What the smoke runs on: a `Target` is a strategy plus what the hardware promises.

`target_for(tpu, ...)` picks it the way `--tpu` says: "fake" (the fake TPU),
"auto" (a TPU when one is here, else the local GPUs, else the fake) or a TPU
name. Whether there is a TPU, and connecting to it, is asked of
`testing._tpu_backend` (the one TPU discovery, shared with the pytest plugin
and `TestCase`); a TPU that cannot be used raises `TPUUnreachableError`.
"""

import dataclasses

from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY
from compat_distribute.testing._tpu_backend import TPUUnreachableError

__all__ = [
    "DEFAULT_TOPOLOGY",
    "Target",
    "TPUUnreachableError",
    "auto_target",
    "fake_tpu_target",
    "gpu_target",
    "target_for",
    "topologies",
    "tpu_target",
]


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


def topologies():
    """The fake TPU's preset topology names, pods included."""
    from compat_distribute.testing import _fake_tpu  # pylint: disable=g-import-not-at-top

    return tuple(_fake_tpu.PRESETS)


def _split_strategy(resolver, topology, steps_per_run):
    """Builds, on demand, a TPUStrategy whose replicas span two logical cores.

    `topology` is called only then (the fake's initialize_tpu_system is cheap
    but not free).
    """
    from compat_distribute import tpu  # pylint: disable=g-import-not-at-top

    def build():
        assignment = _two_cores_per_replica(topology())
        strategy = tpu.TPUStrategy(
            resolver, steps_per_run=steps_per_run, device_assignment=assignment
        )
        return strategy, 2

    return build


def _two_cores_per_replica(topology):
    """A device assignment of `topology` with replicas of two adjacent cores."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    # Two cores of one chip where chips have two (v2, v3), else two chips.
    shape = [1, 1, 1, 2] if topology.mesh_shape[-1] >= 2 else [2, 1, 1, 1]
    cores = topology.num_tasks * topology.num_tpus_per_task
    return tf.tpu.experimental.DeviceAssignment.build(
        topology, computation_shape=shape, num_replicas=cores // 2
    )


def fake_tpu_target(topology, steps_per_run, hosts=None):
    """The fake TPU of `compat_distribute.testing` on virtual CPU devices.

    `hosts`: None or a pod preset's own count runs a pod's hosts as processes;
    1 puts every core in this process. Creates the virtual devices it needs,
    so call it before TensorFlow starts.
    """
    from compat_distribute import tpu  # pylint: disable=g-import-not-at-top
    from compat_distribute.testing import _fake_tpu  # pylint: disable=g-import-not-at-top
    from compat_distribute.testing import _tpu_backend  # pylint: disable=g-import-not-at-top

    resolver = _fake_tpu.FakeTPUClusterResolver(topology, hosts=hosts)
    strategy = tpu.TPUStrategy(resolver, steps_per_run=steps_per_run)
    cores = resolver.num_cores
    where = (
        f"{cores} virtual CPU devices"
        if resolver.pod is None
        else f"{resolver.num_hosts} host processes"
    )
    name = _tpu_backend.fake_name(topology, resolver.num_hosts)
    split = _split_strategy(
        resolver, lambda: _fake_tpu.initialize_tpu_system(resolver), steps_per_run
    )
    return Target(
        strategy=strategy,
        device=f"fake TPU {name} ({cores} cores on {where})",
        replicas=cores,
        steps_per_run=steps_per_run,
        split_strategy=split if cores >= 2 else None,
        info={"hardware": "fake_tpu", "topology": topology, "hosts": resolver.num_hosts},
    )


def _real_tpu_target(backend, steps_per_run):
    from compat_distribute import tpu  # pylint: disable=g-import-not-at-top

    topology = backend.tpu_topology
    cores = backend.num_cores
    name = backend.tpu_name or "from the environment"
    split = _split_strategy(backend.resolver, lambda: topology, steps_per_run)
    return Target(
        strategy=tpu.TPUStrategy(backend.resolver, steps_per_run=steps_per_run),
        device=f"TPU {name} ({cores} cores on {topology.num_tasks} host(s))",
        replicas=cores,
        steps_per_run=steps_per_run,
        split_strategy=split if cores >= 2 else None,
        info={"hardware": "tpu", "tpu": backend.tpu_name},
    )


def tpu_target(name, steps_per_run, *, timeout=None):
    """A real TPU: `name` as `TPUClusterResolver(tpu=...)` takes it ("local" too)."""
    from compat_distribute.testing import _tpu_backend  # pylint: disable=g-import-not-at-top

    kwargs = {} if timeout is None else {"timeout": timeout}
    return _real_tpu_target(_tpu_backend.choose_backend(name, **kwargs), steps_per_run)


def gpu_target(steps_per_run):
    """All local GPUs, through the `MultiWorkerMirroredStrategy` shim (one worker)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from compat_distribute import multi_worker  # pylint: disable=g-import-not-at-top

    gpus = tf.config.list_physical_devices("GPU")  # does not start the runtime
    if not gpus:
        raise TPUUnreachableError("no GPU is visible to TensorFlow")
    return Target(
        strategy=multi_worker.MultiWorkerMirroredStrategy(),
        device=f"{len(gpus)} GPU(s) via MultiWorkerMirroredStrategy",
        replicas=len(gpus),
        steps_per_run=steps_per_run,
        info={"hardware": "gpu"},
    )


def auto_target(steps_per_run, topology=DEFAULT_TOPOLOGY, *, hosts=None, timeout=None):
    """A TPU if one is here, else the local GPUs, else the fake TPU (of `topology`
    on `hosts`)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from compat_distribute.testing import _tpu_backend  # pylint: disable=g-import-not-at-top

    kwargs = {} if timeout is None else {"timeout": timeout}
    backend = _tpu_backend.choose_backend("auto", topology=topology, hosts=hosts, **kwargs)
    if backend.is_real:
        return _real_tpu_target(backend, steps_per_run)
    if tf.config.list_physical_devices("GPU"):
        return gpu_target(steps_per_run)
    return fake_tpu_target(topology, steps_per_run, hosts)


def target_for(tpu, steps_per_run, *, topology=DEFAULT_TOPOLOGY, hosts=None, timeout=None):
    """The `Target` for a `--tpu` value: "fake", "auto" or a TPU name.

    `topology` and `hosts` (None: the topology's own count) shape the fake.
    """
    if tpu == "fake":
        return fake_tpu_target(topology, steps_per_run, hosts)
    if tpu == "auto":
        return auto_target(steps_per_run, topology, hosts=hosts, timeout=timeout)
    return tpu_target(tpu, steps_per_run, timeout=timeout)
