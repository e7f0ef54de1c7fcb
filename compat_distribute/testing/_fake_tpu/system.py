"""The fake TPU's system calls, and the fakes in force.

`initialize_tpu_system` and `shutdown_tpu_system` stand in for
`tf.tpu.experimental`'s; the connect functions accept the fake (which is local
already) and pass every other target to TensorFlow. `ACTIVE` lists the
`FakeTPU`s started and not stopped (`activate` / `deactivate`), for the calls
that pass no resolver.
"""

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
        tf.get_logger().warning(
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
    """`tf.config.experimental_connect_to_cluster`: a one-host fake TPU is local
    already; a pod's client connects to its hosts."""
    if is_fake(cluster_spec_or_resolver):
        if cluster_spec_or_resolver.pod is not None:
            cluster_spec_or_resolver.pod.connect(*args, **kwargs)
        return None
    return _tf.connect_to_cluster(cluster_spec_or_resolver, *args, **kwargs)


def connect_to_host(remote_host=None, job_name="worker"):
    """`tf.config.experimental_connect_to_host` (TF 2.0-2.2 TPU set-up).

    Inside `fake_tpu()`, the fake resolver's `master()` ("", a local TPU) is the
    fake itself, local already; any other host goes to TensorFlow.
    """
    if ACTIVE and remote_host in ("", [""], ("",)):
        return None
    return _tf.connect_to_remote_host(remote_host, job_name)
