"""The one chooser: which hardware the harness runs on, as one typed `Backend`.

"fake", "auto" or a TPU NAME; a NAME never falls back to the fake. Shared by the
plugin, `TestCase` and the smoke command.
"""

import dataclasses

from compat_distribute import _tpu_discovery
from compat_distribute._tpu_discovery import DEFAULT_TIMEOUT_S
from compat_distribute._tpu_discovery import TPUUnreachableError
from compat_distribute.testing._fake_tpu import topologies

__all__ = ["Backend", "choose", "choose_backend", "check_resolves", "TPUUnreachableError"]

KINDS = ("fake", "tpu", "gpu")


@dataclasses.dataclass(frozen=True)
class Backend:
    """The chosen hardware: `kind` is "fake" (the fake TPU), "tpu" (a real one) or "gpu"."""

    kind: str
    num_cores: int  # the replicas it runs: TPU cores, or GPUs
    topology: str | None = None  # the fake's preset
    hosts: int = 1  # the fake's hosts: a pod preset's own count runs a process each
    strict: bool = False  # the fake's strict XLA check
    tpu_name: str | None = None  # what TPUClusterResolver(tpu=...) got
    note: str = ""  # why "auto" chose what it chose
    resolver: object = dataclasses.field(default=None, compare=False, repr=False)
    tpu_topology: object = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def is_real(self):
        """True for a real TPU."""
        return self.kind == "tpu"

    @property
    def local_cores(self):
        """The fake's cores on this process's devices: none for a pod on its own hosts
        (they hold the cores), all of them for one host (a pod preset's included)."""
        return self.num_cores if self.kind == "fake" and self.hosts == 1 else 0

    def describe(self):
        """E.g. "fake (v3-8, 8 cores on CPU)", "fake (v3-32 on 1 host, 32 cores on CPU)",
        "local (real TPU, 8 cores)" or "2 local GPUs (MultiWorkerMirroredStrategy)"."""
        note = f"; {self.note}" if self.note else ""
        if self.kind == "tpu":
            name = self.tpu_name or "TPU from the environment"
            return f"{name} (real TPU, {self.num_cores} cores{note})"
        if self.kind == "gpu":
            gpus = f"{self.num_cores} local GPU{'s' * (self.num_cores > 1)}"
            return f"{gpus} (MultiWorkerMirroredStrategy{note})"
        strict = ", strict" if self.strict else ""
        where = "CPU" if self.hosts == 1 else f"{self.hosts} host processes"
        name = fake_name(self.topology, self.hosts)
        return f"fake ({name}, {self.num_cores} cores on {where}{strict}{note})"

    def make_resolver(self):
        """The resolver to pass to `compat_distribute.TPUStrategy` (a TPU's or the fake's)."""
        if self.kind == "tpu":
            return self.resolver
        if self.kind != "fake":
            raise ValueError(f"{self.describe()} has no TPU resolver; build its strategy instead.")
        from compat_distribute.testing import _fake_tpu as fake_tpu  # TensorFlow, on first use

        if self.hosts == 1:
            return fake_tpu.FakeTPUClusterResolver(self.topology, strict=self.strict, hosts=1)
        # One pod a process: every resolver asked for shares its hosts.
        key = (self.topology, self.strict)
        if key not in _POD_RESOLVERS:
            _POD_RESOLVERS[key] = fake_tpu.FakeTPUClusterResolver(self.topology, strict=self.strict)
        return _POD_RESOLVERS[key]


_POD_RESOLVERS = {}  # (topology, strict) -> the fake pod's resolver


def fake_name(topology, hosts):
    """The fake's topology, and its host count where it is not the preset's own:
    "v3-8", "v3-32" (4 host processes), "v3-32 on 1 host"."""
    own = topologies.PRESETS[topology].hosts
    return topology if hosts == own else f"{topology} on {hosts} host{'s' * (hosts > 1)}"


def fake_backend(topology=None, strict=False, note="", hosts=None):
    """The fake of preset `topology` (None: the default) on `hosts` hosts (None: its own)."""
    name, _ = topologies.resolve(topology, None)
    preset = topologies.PRESETS[name]
    return Backend(
        kind="fake",
        num_cores=preset.cores,
        hosts=topologies.host_count(name, hosts),
        topology=name,
        strict=strict,
        note=note,
    )


def _real_backend(name, note, timeout, connect_fn):
    resolver, topology = _tpu_discovery.connect(name, timeout=timeout, connect_fn=connect_fn)
    cores = topology.num_tasks * topology.num_tpus_per_task
    return Backend(
        kind="tpu",
        num_cores=cores,
        tpu_name=name,
        note=note,
        resolver=resolver,
        tpu_topology=topology,
    )


def _local_gpus():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return len(tf.config.list_physical_devices("GPU"))  # Does not start the runtime.


def choose_backend(
    tpu="fake",
    *,
    topology=None,
    hosts=None,
    strict=False,
    gpus=False,
    timeout=DEFAULT_TIMEOUT_S,
    connect_fn=None,
):
    """Returns the `Backend` for the `tpu` setting; see the module docstring.

    `topology` (None: the fake's default) and `hosts` (None: the topology's own
    count) shape the fake. `gpus=True` lets "auto" pick the local GPUs when
    there is no TPU.

    `connect_fn(name)` replaces the real connect (it returns a resolver and
    its topology), for tests of the deadline.
    """
    if tpu == "fake":
        return fake_backend(topology, strict, hosts=hosts)
    if tpu != "auto":
        return _real_backend(tpu, "", timeout, connect_fn)
    found = _tpu_discovery.tpu_here()
    if found is not None:
        return _real_backend(found.name, f"auto: {found.why}", timeout, connect_fn)
    if not gpus:
        return fake_backend(topology, strict, note="auto: no TPU here", hosts=hosts)
    count = _local_gpus()
    if count:
        return Backend(kind="gpu", num_cores=count, note="auto: no TPU here")
    return fake_backend(topology, strict, note="auto: no TPU or GPU here", hosts=hosts)


def choose(settings, *, timeout=DEFAULT_TIMEOUT_S, connect_fn=None):
    """`choose_backend` for the harness's `Settings`."""
    return choose_backend(
        settings.tpu,
        topology=settings.fake_tpu_topology,
        hosts=settings.given_hosts,
        strict=settings.fake_tpu_strict,
        timeout=timeout,
        connect_fn=connect_fn,
    )


def check_resolves(name, *, timeout=DEFAULT_TIMEOUT_S):
    """Checks that TPU `name` resolves, without connecting (an xdist controller's check)."""
    _tpu_discovery.check_name(name, timeout=timeout)
