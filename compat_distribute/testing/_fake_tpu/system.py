"""The fake TPU's system calls, and the fakes in force.

`initialize_tpu_system` / `shutdown_tpu_system`, the connect calls, and TF1
sessions inside `fake_tpu()`.
"""

import functools

import tensorflow as tf

from compat_distribute.testing import _tf
from compat_distribute.testing._fake_tpu import pod as pod_lib
from compat_distribute.testing._fake_tpu import resolver as resolver_lib

# The fake TPUs in force (innermost last), for calls that pass no resolver.
ACTIVE = []

# TPU names initialised and not shut down since, as TF's tpu_strategy_util keeps them.
_INITIALIZED = set()


def activate(fake):
    """Puts a started `FakeTPU` in force; its pod's hosts are shared by new resolvers."""
    ACTIVE.append(fake)
    if fake.pod is not None:
        pod_lib.share(fake.pod)


def deactivate(fake):
    ACTIVE.remove(fake)
    if fake.pod is not None:
        pod_lib.unshare(fake.pod)


def is_fake(resolver):
    return isinstance(resolver, resolver_lib.FakeTPUClusterResolver)


def default_resolver():
    """What TF1's `TPUClusterResolver("")` gives: the active fake's slice, else the default."""
    if ACTIVE:
        return ACTIVE[-1].resolver()
    return resolver_lib.FakeTPUClusterResolver()


def fake_resolver(name, resolver):
    """`resolver`, or the default one for None; raises for a resolver that is not a fake."""
    if resolver is None:
        return default_resolver()
    if not is_fake(resolver):
        raise TypeError(
            f"{name} must be a compat_distribute.testing.FakeTPUClusterResolver (or None); "
            f"got {resolver!r} ({type(resolver).__name__}). Build the resolver inside "
            f"fake_tpu(), or pass FakeTPUClusterResolver(...) directly."
        )
    return resolver


def initialize_tpu_system(cluster_resolver=None):
    """`tf.tpu.experimental.initialize_tpu_system` for a fake TPU.

    Returns the slice's `tf.tpu.experimental.Topology`, from which
    `tf.tpu.experimental.DeviceAssignment.build` makes device assignments.
    Initialising a slice twice logs TensorFlow's warning, in its words.
    """
    resolver = fake_resolver("cluster_resolver", cluster_resolver)
    name = resolver._tpu  # pylint: disable=protected-access
    if name in _INITIALIZED:
        _tf.tf_logging.warning(
            "TPU system %s has already been initialized. "
            "Reinitializing the TPU can cause previously created "
            "variables on TPU to be lost.",
            name,
        )
    if resolver.pod is not None:
        resolver.pod.start()
    topology = resolver.tpu_topology()
    resolver.set_tpu_topology(topology.serialized())
    _INITIALIZED.add(name)
    return topology


def shutdown_tpu_system(cluster_resolver=None):
    """`tf.tpu.experimental.shutdown_tpu_system` for a fake TPU."""
    resolver = fake_resolver("cluster_resolver", cluster_resolver)
    resolver._tpu_topology = None  # pylint: disable=protected-access
    _INITIALIZED.discard(resolver._tpu)  # pylint: disable=protected-access


def connect_to_cluster(cluster_spec_or_resolver, *args, **kwargs):
    """`tf.config.experimental_connect_to_cluster`: a one-host fake TPU (or a
    cluster of its addresses alone) is local already; a pod's client connects
    to its hosts."""
    if is_fake(cluster_spec_or_resolver):
        if cluster_spec_or_resolver.pod is not None:
            cluster_spec_or_resolver.pod.connect(*args, **kwargs)
        return None
    if isinstance(cluster_spec_or_resolver, tf.train.ClusterSpec) and _only_fake_tasks(
        cluster_spec_or_resolver.as_cluster_def()
    ):
        return None
    return _tf.connect_to_cluster(cluster_spec_or_resolver, *args, **kwargs)


def connect_to_host(remote_host=None, job_name="worker"):
    """`tf.config.experimental_connect_to_host` (TF 2.0-2.2 TPU set-up).

    Inside `fake_tpu()`, a fake resolver's `master()` ("" for a local TPU, or
    the grpc:// address it answers as) is the fake itself, local already; any
    other host goes to TensorFlow.
    """
    hosts = remote_host if isinstance(remote_host, (list, tuple)) else [remote_host]
    if ACTIVE and hosts and all(host == "" or names_fake(host) for host in hosts):
        return None
    return _tf.connect_to_remote_host(remote_host, job_name)


# Where a Cloud TPUClusterResolver() looks for its TPU when given none, in order
# (TensorFlow's tpu/client/client.py), then where Colab's TPU runtime put it.
_TPU_ENV_VARS = ("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_NAME")
COLAB_ENV_VAR = "COLAB_TPU_ADDR"
# A TPU named but not addressed answers at TF's default TPU port, on loopback
# (nothing connects there).
NAMED_TPU_ADDRESS = "127.0.0.1:8470"
_GRPC = "grpc://"


def cloud_address(tpu, environ):
    """The "host:port" a Cloud or Colab `TPUClusterResolver(tpu)` would name; None: local.

    `tpu` None or "" reads the environment as TensorFlow does (then
    `COLAB_TPU_ADDR`); "local" or nothing set is a local TPU; "grpc://host:port"
    is that address (the first of several); any other name gets
    `NAMED_TPU_ADDRESS`.
    """
    if not tpu:
        named = [environ[v] for v in _TPU_ENV_VARS if environ.get(v)]
        if named:
            tpu = named[0]
        elif environ.get(COLAB_ENV_VAR):
            tpu = _GRPC + environ[COLAB_ENV_VAR]
    if not tpu or tpu == "local":
        return None
    if not isinstance(tpu, str):
        raise TypeError(f"tpu must be a TPU name or 'grpc://host:port'; got {tpu!r}.")
    first = tpu.split(",")[0].strip()
    if first.startswith(_GRPC) or ":" in first:
        return first.removeprefix(_GRPC)
    return NAMED_TPU_ADDRESS


def names_fake(target):
    """True for "grpc://host:port" (or "host:port") that a fake in force answers as."""
    if isinstance(target, bytes):
        target = target.decode()
    if not isinstance(target, str) or not target:
        return False
    return target.removeprefix(_GRPC) in {a for fake in ACTIVE for a in fake.addresses}


def _only_fake_tasks(cluster_def):
    tasks = [address for job in cluster_def.job for address in job.tasks.values()]
    return bool(tasks) and all(names_fake(address) for address in tasks)


def session_arguments(target, config):
    """`(target, config)` for a TF1 session opened inside `fake_tpu()`.

    A session on a fake's address runs in this process, and a config whose
    `cluster_def` names only fake addresses (copied from the resolver's
    `cluster_spec()`) loses it. A session in this process sees every logical
    CPU (`sees_every_cpu`), whatever `device_count` the config asked for, as a
    session on a TPU worker sees all its cores. Other targets are left as they
    are.
    """
    if not ACTIVE:
        return target, config
    if names_fake(target):
        target = ""
    if target:
        return target, config
    updated = tf.compat.v1.ConfigProto()
    if config is not None:
        updated.CopyFrom(config)
    if _only_fake_tasks(updated.cluster_def):
        updated.ClearField("cluster_def")
    return "", sees_every_cpu(updated)


def sees_every_cpu(config):
    """`config` (a `ConfigProto`, changed in place) with a CPU count of at least
    the process's logical CPUs: a TF1 `Session` takes its devices from its
    config alone, so without it the session has one CPU, and the replicas' ops
    on CPU:1.. fail to place (or, with soft placement, all run on CPU:0)."""
    cpus = len(tf.config.list_logical_devices("CPU"))
    config.device_count["CPU"] = max(config.device_count.get("CPU", 0), cpus)
    return config


def _session_init(original):
    @functools.wraps(original)
    def __init__(self, target="", graph=None, config=None):  # pylint: disable=invalid-name
        target, config = session_arguments(target, config)
        original(self, target, graph, config)

    return __init__


# TF1's session classes (under tf.compat.v1) -> their __init__ inside fake_tpu().
SESSION_INITS = {
    name: _session_init(getattr(tf.compat.v1, name).__init__)
    for name in ("Session", "InteractiveSession")
}
