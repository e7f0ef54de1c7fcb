"""`FakeTPU` / `fake_tpu()`: TensorFlow's TPU entry points routed to the fake."""

import os

import numpy as np

from compat_distribute import _patching
from compat_distribute import tpu
from compat_distribute.testing._fake_tpu import pod as pod_lib
from compat_distribute.testing._fake_tpu import resolver as resolver_lib
from compat_distribute.testing._fake_tpu import strategy as strategy_lib
from compat_distribute.testing._fake_tpu import system
from compat_distribute.testing._fake_tpu import tf_calls
from compat_distribute.testing._fake_tpu import topologies
from compat_distribute.testing import devices as devices_lib


class FakeTPU:
    """Routes TensorFlow's TPU entry points to a fake TPU; `stop()` restores them.

    While started, `tf.distribute.cluster_resolver.TPUClusterResolver(...)`
    returns a `FakeTPUClusterResolver` of this topology (whatever `tpu=` names),
    `tf.config.experimental_connect_to_cluster` accepts it and
    `tf.config.experimental_connect_to_host` its `master()`, the
    `tf.tpu.experimental` system calls are `initialize_tpu_system` /
    `shutdown_tpu_system`, and `tf.distribute.TPUStrategy`,
    `tf.distribute.experimental.TPUStrategy` and
    `tf.compat.v1.distribute.experimental.TPUStrategy` build fake strategies;
    `compat_distribute.TPUStrategy()` with no resolver (TF1's
    `TPUClusterResolver("")`) builds one too. A context manager, and
    `start()`/`stop()` as in chex.

    A one-host resolver built from a TPU name, a "grpc://host:port" address,
    or with `TPU_NAME` / `COLAB_TPU_ADDR` set answers as a Cloud or Colab TPU's
    does (`system.cloud_address`): `master()` is a grpc:// address and
    `cluster_spec()` has a `worker` job. Nothing connects there: a TF1 session,
    `experimental_connect_to_cluster` or `experimental_connect_to_host` naming
    it runs on the fake, in this process, and a TF1 session here sees every
    core (`system.session_arguments`).

    A pod preset ("v3-32") starts its hosts, one server process each, in
    `start()`, and stops them in `stop()`; every resolver the fake makes
    shares them. `hosts=1` runs every core of the slice in this process.
    """

    def __init__(
        self,
        topology=None,
        *,
        mesh_shape=None,
        strict=False,
        device_type="CPU",
        hosts=None,
    ):
        # Bad input fails here, not when the first resolver is built.
        name, mesh = resolver_lib.check_config(topology, mesh_shape, strict, device_type)
        # A pod's hosts, shared by every resolver of the fake; None for one host.
        self._pod = pod_lib.for_slice(name, mesh, topologies.host_count(name, hosts), device_type)
        self._num_cores = int(np.prod(mesh))
        self._config = dict(
            topology=topology,
            mesh_shape=mesh_shape,
            strict=strict,
            device_type=device_type,
            hosts=hosts,
        )
        self._owns_pod = True  # False for a pod shared with a resolver (see `of`)
        self._addresses = set()  # "host:port" its resolvers answer as (Cloud-like)
        self._resolver_class = _resolver_class(self)
        # Classes bound before start() (TF's TPUClusterResolver) build the fake's.
        self._patch = _patching.Patch(self._routes(), forward_bound=True)

    @classmethod
    def of(cls, resolver):
        """A `FakeTPU` of `resolver`'s slice whose resolvers share its hosts.

        For tests that hold a resolver (the pytest plugin's `tpu_resolver`) and
        run TPU code against the same slice: a pod is started once, not per
        fake, and stays the resolver's to stop.
        """
        fake = cls(**resolver.arguments())
        if resolver.pod is not None:
            fake._pod = resolver.pod
            fake._owns_pod = False
        return fake

    def resolver(self, job_name=resolver_lib.JOB):
        """A new `FakeTPUClusterResolver` of this fake's topology."""
        return self._share_pod(
            resolver_lib.FakeTPUClusterResolver(job_name=job_name, **self._config)
        )

    def _share_pod(self, resolver):
        if self._pod is not None:
            resolver.pod = self._pod
        return resolver

    @property
    def pod(self):
        """The `FakePod` of a pod preset (its hosts), None for one host."""
        return self._pod

    @property
    def addresses(self):
        """The "host:port" addresses its resolvers answer as; sessions there run here."""
        return frozenset(self._addresses)

    def _routes(self):
        system_calls = (
            ("initialize_tpu_system", system.initialize_tpu_system),
            ("shutdown_tpu_system", system.shutdown_tpu_system),
        )
        connect = (
            ("experimental_connect_to_cluster", system.connect_to_cluster),
            ("experimental_connect_to_host", system.connect_to_host),
        )
        routes = []
        for root in ("", "compat.v2.", "compat.v1."):
            routes.append(
                (root + "distribute.cluster_resolver", "TPUClusterResolver", self._resolver_class)
            )
            routes += [(root + "tpu.experimental", name, fn) for name, fn in system_calls]
            routes += [(root + "config", name, fn) for name, fn in connect]
        for root in ("", "compat.v2."):
            routes += [
                (root + "distribute", "TPUStrategy", strategy_lib.FakeTPUStrategy),
                (
                    root + "distribute.experimental",
                    "TPUStrategy",
                    strategy_lib.ExperimentalFakeTPUStrategy,
                ),
            ]
        # TF1's signature is the shim's; with a fake's resolver it builds the fake.
        routes.append(("compat.v1.distribute.experimental", "TPUStrategy", tpu.TPUStrategy))
        routes += [
            ("compat.v1." + name, "__init__", init) for name, init in system.SESSION_INITS.items()
        ]
        return routes

    @property
    def active(self):
        return self._patch.active

    def start(self):
        if self.active:
            self._patch.start()  # raises: started twice
        # Before the patch: a failed start leaves nothing routed.
        if self._pod is not None:
            self._pod.start()
        else:  # The cores exist from here, so TF code run first inside the fake sees them.
            devices_lib.set_virtual_devices(self._num_cores, self._config["device_type"])
        self._patch.start()
        system.activate(self)
        tf_calls.take_fake_resolvers()  # names of TF's TPU calls bound before start()
        return self

    def stop(self):
        if not self.active:
            return
        try:
            if self._pod is not None and self._owns_pod:
                self._pod.stop()
        finally:
            self._patch.stop()
            system.deactivate(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()


def _resolver_class(fake):
    """`TPUClusterResolver` with TF's signature, building `fake`'s resolvers."""

    class TPUClusterResolver(resolver_lib.FakeTPUClusterResolver):
        """`tf.distribute.cluster_resolver.TPUClusterResolver` inside `fake_tpu()`."""

        def __init__(
            self,
            tpu=None,
            zone=None,
            project=None,
            job_name=resolver_lib.JOB,
            coordinator_name=None,
            coordinator_address=None,
            credentials="default",
            service=None,
            discovery_url=None,
        ):
            del zone, project, coordinator_name, coordinator_address
            del credentials, service, discovery_url
            # A pod's hosts have addresses of their own.
            address = None if fake.pod is not None else system.cloud_address(tpu, os.environ)
            super().__init__(
                job_name=job_name, address=address, **fake._config  # pylint: disable=protected-access
            )
            fake._share_pod(self)  # pylint: disable=protected-access
            if address is not None:
                fake._addresses.add(address)  # pylint: disable=protected-access

        @staticmethod
        def connect(tpu=None, zone=None, project=None):
            resolver = TPUClusterResolver(tpu, zone, project)
            system.initialize_tpu_system(resolver)
            return resolver

    return TPUClusterResolver


def fake_tpu(
    topology=None,
    *,
    mesh_shape=None,
    strict=False,
    device_type="CPU",
    hosts=None,
):
    """A `FakeTPU`: `with fake_tpu("v3-8"): ...` runs unmodified TPU code on CPUs.

    `topology=None` is the default preset (`DEFAULT_TOPOLOGY`).

    `fake_tpu("v3-32")` is a pod: one server process per host, driven by this
    process as the pod's client; `hosts=1` keeps every core in this process.
    """
    return FakeTPU(
        topology, mesh_shape=mesh_shape, strict=strict, device_type=device_type, hosts=hosts
    )
