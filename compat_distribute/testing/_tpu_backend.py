"""Which TPU the harness runs on: a real one, or the fake on virtual CPUs.

`choose_backend(tpu, ...)` turns a `tpu` setting into a `Backend`:

- "fake": the fake TPU (`FakeTPUClusterResolver`); TensorFlow is not touched.
- a NAME: the real TPU NAME, which must be reachable: it is resolved,
  connected and initialised within `timeout` seconds. Anything else raises
  `TPUUnreachableError`; it never falls back to the fake, so a run that asked
  for a TPU cannot silently land on the CPU.
- "auto": a real TPU when one is configured here (the rule of
  `compat_distribute._tpu_discovery.tpu_here`), else the fake. A configured
  TPU that then fails to connect raises as for a NAME: only the absence of any
  TPU selects the fake. Without a TPU, "auto" starts no TensorFlow runtime.

The smoke command, the pytest plugin and `TestCase` all choose here;
`TPUStrategy` asks `_tpu_discovery` directly (the core never imports the
harness). A real TPU is connected when it is chosen, so its resolver is ready.
"""

import dataclasses

from compat_distribute import _tpu_discovery
from compat_distribute._tpu_discovery import DEFAULT_TIMEOUT_S
from compat_distribute._tpu_discovery import TPUUnreachableError
from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY
from compat_distribute.testing._fake_tpu import topologies

__all__ = ["Backend", "choose", "choose_backend", "check_resolves", "TPUUnreachableError"]


@dataclasses.dataclass(frozen=True)
class Backend:
    """The chosen TPU: `kind` is "fake" or "tpu"."""

    kind: str
    num_cores: int
    topology: str | None = None  # the fake's topology
    hosts: int = 1  # the fake's hosts: a pod preset's own count runs a process each
    strict: bool = False  # the fake's strict XLA check
    tpu_name: str | None = None  # what TPUClusterResolver(tpu=...) got
    note: str = ""  # why "auto" chose what it chose
    resolver: object = dataclasses.field(default=None, compare=False, repr=False)
    tpu_topology: object = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def is_real(self):
        return self.kind == "tpu"

    @property
    def local_cores(self):
        """The fake's cores on this process's devices: none for a pod on its own hosts
        (they hold the cores), all of them for one host (a pod preset's included)."""
        return 0 if self.is_real or self.hosts > 1 else self.num_cores

    def describe(self):
        """E.g. "fake (v3-8, 8 cores on CPU)", "fake (v3-32 on 1 host, 32 cores on CPU)"
        or "local (real TPU, 8 cores)"."""
        note = f"; {self.note}" if self.note else ""
        if self.is_real:
            name = self.tpu_name or "TPU from the environment"
            return f"{name} (real TPU, {self.num_cores} cores{note})"
        strict = ", strict" if self.strict else ""
        where = "CPU" if self.hosts == 1 else f"{self.hosts} host processes"
        name = fake_name(self.topology, self.hosts)
        return f"fake ({name}, {self.num_cores} cores on {where}{strict}{note})"

    def make_resolver(self):
        """The resolver to pass to `compat_distribute.TPUStrategy`."""
        if self.is_real:
            return self.resolver
        from compat_distribute.testing import _fake_tpu as fake_tpu

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


def fake_backend(topology=DEFAULT_TOPOLOGY, strict=False, note="", hosts=None):
    """The fake of preset `topology` on `hosts` hosts (None: the preset's own count)."""
    preset = topologies.PRESETS[topology]
    return Backend(
        kind="fake",
        num_cores=preset.cores,
        hosts=topologies.host_count(topology, hosts),
        topology=topology,
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


def choose_backend(
    tpu="fake",
    *,
    topology=DEFAULT_TOPOLOGY,
    hosts=None,
    strict=False,
    timeout=DEFAULT_TIMEOUT_S,
    connect_fn=None,
):
    """Returns the `Backend` for the `tpu` setting; see the module docstring.

    `topology` and `hosts` (None: the topology's own count) shape the fake.

    `connect_fn(name)` replaces the real connect (it returns a resolver and
    its topology), for tests of the deadline.
    """
    if tpu == "fake":
        return fake_backend(topology, strict, hosts=hosts)
    if tpu != "auto":
        return _real_backend(tpu, "", timeout, connect_fn)
    found = _tpu_discovery.tpu_here()
    if found is None:
        return fake_backend(topology, strict, note="auto: no TPU here", hosts=hosts)
    return _real_backend(found.name, f"auto: {found.why}", timeout, connect_fn)


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
