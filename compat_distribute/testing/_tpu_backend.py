"""Which TPU the harness runs on: a real one, or the fake on virtual CPUs.

`choose(settings)` turns the `tpu` setting into a `Backend`:

- "fake": the fake TPU (`FakeTPUClusterResolver`); TensorFlow is not touched.
- a NAME: the real TPU NAME, which must be reachable: its
  `TPUClusterResolver(tpu=NAME)` resolves and `experimental_connect_to_cluster`
  and `initialize_tpu_system` succeed within `timeout` seconds. Anything else
  raises `TPUUnreachableError`; it never falls back to the fake, so a run that
  asked for a TPU cannot silently land on the CPU.
- "auto": a real TPU when one is configured here, else the fake. "Configured"
  means a TPU named by the environment (`TPU_NAME`,
  `KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS`, `TPU_CONFIG`, as `TPUClusterResolver()`
  reads them) or TPU chips attached to this host (a TPU VM, "local"). A
  configured TPU that then fails to connect raises as for a NAME: only the
  absence of any TPU selects the fake. Without a TPU, "auto" starts no
  TensorFlow runtime.

A real TPU is connected in this process when it is chosen (the probe and the
connection are the same step), so the resolver is ready to use.
"""

import dataclasses
import sys
import threading
import traceback

DEFAULT_TIMEOUT_S = 300.0  # Initialising a large TPU slice takes minutes.


class TPUUnreachableError(RuntimeError):
    """A real TPU was asked for (or configured) and cannot be used."""


@dataclasses.dataclass(frozen=True)
class Backend:
    """The chosen TPU: `kind` is "fake" or "tpu"."""

    kind: str
    num_cores: int
    topology: str | None = None  # the fake's topology
    hosts: int = 1  # the fake's host processes (a pod preset has several)
    strict: bool = False  # the fake's strict XLA check
    tpu_name: str | None = None  # what TPUClusterResolver(tpu=...) got
    note: str = ""  # why "auto" chose what it chose
    resolver: object = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def is_real(self):
        return self.kind == "tpu"

    @property
    def local_cores(self):
        """The fake's cores on this process's devices: none for a pod (its hosts hold them)."""
        return 0 if self.is_real or self.hosts > 1 else self.num_cores

    def describe(self):
        """E.g. "fake (v3-8, 8 cores on CPU)" or "local (real TPU, 8 cores)"."""
        note = f"; {self.note}" if self.note else ""
        if self.is_real:
            name = self.tpu_name or "TPU from the environment"
            return f"{name} (real TPU, {self.num_cores} cores{note})"
        strict = ", strict" if self.strict else ""
        where = "CPU" if self.hosts == 1 else f"{self.hosts} host processes"
        return f"fake ({self.topology}, {self.num_cores} cores on {where}{strict}{note})"

    def make_resolver(self):
        """The resolver to pass to `compat_distribute.TPUStrategy`."""
        if self.is_real:
            return self.resolver
        from compat_distribute.testing import _fake_tpu as fake_tpu

        if self.hosts == 1:
            return fake_tpu.FakeTPUClusterResolver(self.topology, strict=self.strict)
        # One pod a process: every resolver asked for shares its hosts.
        key = (self.topology, self.strict)
        if key not in _POD_RESOLVERS:
            _POD_RESOLVERS[key] = fake_tpu.FakeTPUClusterResolver(self.topology, strict=self.strict)
        return _POD_RESOLVERS[key]


_POD_RESOLVERS = {}  # (topology, strict) -> the fake pod's resolver


def fake_backend(settings, note=""):
    from compat_distribute.testing import _fake_tpu as fake_tpu

    preset = fake_tpu.PRESETS[settings.fake_tpu_topology]
    return Backend(
        kind="fake",
        num_cores=preset.cores,
        hosts=preset.hosts,
        topology=settings.fake_tpu_topology,
        strict=settings.fake_tpu_strict,
        note=note,
    )


def _connect_and_initialize(name):
    """Resolves, connects and initialises TPU `name`; returns (resolver, cores)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
    tf.config.experimental_connect_to_cluster(resolver)
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    return resolver, topology.num_tasks * topology.num_tpus_per_task


def _resolve(name):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)


def check_resolves(name, *, timeout=DEFAULT_TIMEOUT_S):
    """Checks that TPU `name` resolves, without connecting to it.

    For a process that must not hold the TPU itself (an xdist controller):
    catches a wrong name early. Raises `TPUUnreachableError` as `connect` does.
    """
    _call_with_deadline(_resolve, name, timeout, "resolve")


def connect(name, *, timeout=DEFAULT_TIMEOUT_S, connect_fn=_connect_and_initialize):
    """Runs `connect_fn(name)` with a deadline; returns its result.

    Raises `TPUUnreachableError` with the cause, or, past `timeout` seconds,
    with the Python stack of the blocked call (the call itself cannot be
    cancelled; the caller is expected to end the session).
    """
    return _call_with_deadline(connect_fn, name, timeout, "connect and initialise")


def _call_with_deadline(fn, name, timeout, what):
    shown = "the TPU from the environment" if name is None else f"TPU {name!r}"
    outcome = {}

    def target():
        try:
            outcome["result"] = fn(name)
        except BaseException as e:  # pylint: disable=broad-except
            outcome["error"] = e

    thread = threading.Thread(target=target, name=f"tpu-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        frame = sys._current_frames().get(thread.ident)  # pylint: disable=protected-access
        stack = "".join(traceback.format_stack(frame)) if frame else "(no stack)\n"
        raise TPUUnreachableError(
            f"{shown} did not {what} within {timeout:g} s. The call was blocked at:\n{stack}"
        )
    if "error" in outcome:
        e = outcome["error"]
        first_line = (str(e).strip().splitlines() or [""])[0]
        raise TPUUnreachableError(
            f"{shown} is not reachable: {type(e).__name__}: {first_line}"
        ) from e
    return outcome.get("result")


def _environment_names_a_tpu():
    """Whether TPUClusterResolver() would find a TPU name in the environment."""
    from tensorflow.python.tpu.client import client  # pylint: disable=g-import-not-at-top

    try:
        client.Client(tpu=None)  # Raises ValueError when nothing names a TPU.
    except ValueError:
        return False
    except Exception:  # pylint: disable=broad-except
        return True  # Named, but the lookup failed: connect() reports why.
    return True


def choose(settings, *, timeout=DEFAULT_TIMEOUT_S, connect_fn=_connect_and_initialize):
    """Returns the `Backend` for `settings.tpu`; see the module docstring."""
    if settings.tpu == "fake":
        return fake_backend(settings)
    if settings.tpu != "auto":
        resolver, cores = connect(settings.tpu, timeout=timeout, connect_fn=connect_fn)
        return Backend(kind="tpu", num_cores=cores, tpu_name=settings.tpu, resolver=resolver)

    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if _environment_names_a_tpu():
        name, note = None, "auto: TPU named by the environment"
    elif tf.config.list_physical_devices("TPU"):  # Does not start the runtime.
        name, note = "local", "auto: TPU attached to this host"
    else:
        return fake_backend(settings, note="auto: no TPU here")
    resolver, cores = connect(name, timeout=timeout, connect_fn=connect_fn)
    return Backend(kind="tpu", num_cores=cores, tpu_name=name, note=note, resolver=resolver)
