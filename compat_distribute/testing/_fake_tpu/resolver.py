"""The fake TPU's cluster resolver, answering like `TPUClusterResolver(tpu="local")`.

It names the fake's strategy builder as `compat_distribute.TPUStrategy`'s backend.
"""

import numpy as np
import tensorflow as tf

from compat_distribute import tpu
from compat_distribute.testing import _tf
from compat_distribute.testing import devices as _devices
from compat_distribute.testing._fake_tpu import pod as pod_lib
from compat_distribute.testing._fake_tpu import topologies

JOB = "worker"

# Called as each resolver is made. tf_calls, which imports this module, adds the
# one that lets TensorFlow's own TPU calls take a fake resolver.
ON_CREATE = []

def check_config(topology, mesh_shape, strict, device_type):
    """`(name, mesh)` of a fake TPU's arguments; raises before any state changes."""
    name_and_mesh = topologies.resolve(topology, mesh_shape)
    if device_type not in _devices.DEVICE_TYPES:
        raise ValueError(
            f"device_type must be one of {_devices.DEVICE_TYPES}; got "
            f"{device_type!r}. The fake TPU's cores are logical CPU (or GPU) devices."
        )
    if not isinstance(strict, bool):
        raise TypeError(f"strict must be True or False; got {strict!r}.")
    return name_and_mesh


class FakeTPUClusterResolver(tf.distribute.cluster_resolver.ClusterResolver):
    """A one-host TPU slice of `topology` (or `mesh_shape`) on logical devices.

    `topology` is a preset name of `PRESETS`; None is the default preset
    (`DEFAULT_TOPOLOGY`, "v3-8"), or the mesh's own name with `mesh_shape`.

    Answers like `TPUClusterResolver(tpu="local")` on a TPU host with that
    slice: `num_accelerators()` is `{"TPU": cores}`, `master()` is "",
    `cluster_spec()` is empty, `get_tpu_system_metadata()` reports one host
    with all cores. The cores are the first `cores` logical `device_type`
    devices; they are created here when TensorFlow has not started yet (see
    `compat_distribute.testing.set_virtual_devices`). `strict=True` makes the
    strategy check step functions for TPU (XLA) compatibility when traced.

    A pod preset ("v3-32") answers as `TPUClusterResolver` does on a pod's
    client: its `pod` (a `FakePod`) runs one server process per host, started
    on first use (`master()`, `cluster_spec()`, a strategy) and stopped by
    `pod.stop()` or at exit; inside `fake_tpu()` of that preset it shares the
    fake's hosts. `hosts=1` puts every core of the slice in this process.

    `address="host:port"` makes a one-host slice answer as a Cloud or Colab
    TPU's resolver does: `master()` is "grpc://host:port" and `cluster_spec()`
    has that task in job `job_name`. Nothing connects there: inside
    `fake_tpu()`, sessions and connects that name it run on the fake, locally.
    """

    def __init__(
        self,
        topology=None,
        *,
        mesh_shape=None,
        strict=False,
        device_type="CPU",
        job_name=JOB,
        hosts=None,
        address=None,
    ):
        self._topology_name, self._mesh_shape = check_config(
            topology, mesh_shape, strict, device_type
        )
        _check_job_name(job_name)
        self._num_hosts = topologies.host_count(self._topology_name, hosts)
        pod = pod_lib.for_slice(self._topology_name, self._mesh_shape, self._num_hosts, device_type)
        self._address = _check_address(address, pod)
        self._num_cores = int(np.prod(self._mesh_shape))
        self._strict = strict
        self._device_type = device_type
        if pod is None:
            self.pod = None
            self._core_devices = tuple(_devices.set_virtual_devices(self._num_cores, device_type))
        else:  # The hosts of a fake of this pod in force, else its own.
            self.pod = pod_lib.shared(self._topology_name) or pod
            self._core_devices = self.pod.core_devices
        self._tpu = f"fake-{self._topology_name}"  # TF's initialize_tpu_system keys on this.
        for hook in ON_CREATE:
            hook()
        self.task_type = job_name
        self.task_id = 0
        self._tpu_topology = None  # The serialized proto, once initialized (as in TF).
        self._topology = None

    def __repr__(self):
        return (
            f"FakeTPUClusterResolver({self._topology_name!r}, mesh_shape={self._mesh_shape}, "
            f"cores={self._num_cores}, hosts={self._num_hosts}, device_type={self._device_type!r}"
            + ("" if self._address is None else f", address={self._address!r}")
            + ")"
        )

    # What the fake is.

    @property
    def topology_name(self):
        return self._topology_name

    @property
    def mesh_shape(self):
        return self._mesh_shape

    @property
    def num_cores(self):
        return self._num_cores

    @property
    def num_hosts(self):
        return self._num_hosts

    @property
    def strict(self):
        return self._strict

    @property
    def device_type(self):
        return self._device_type

    @property
    def address(self):
        """The "host:port" this one-host slice answers as (see the class); None: local."""
        return self._address

    @property
    def core_devices(self):
        """The logical devices that stand in for TPU cores 0..cores-1."""
        return self._core_devices

    def arguments(self):
        """The constructor's arguments that make a resolver of this slice."""
        preset = self._topology_name in topologies.PRESETS
        return dict(
            topology=self._topology_name if preset else None,
            mesh_shape=None if preset else self._mesh_shape,
            strict=self._strict,
            device_type=self._device_type,
            hosts=self._num_hosts,
        )

    def replace(self, *, strict):
        """A new resolver of this slice, sharing its hosts, with `strict` changed."""
        resolver = FakeTPUClusterResolver(
            **dict(self.arguments(), strict=strict),
            job_name=self.task_type,
            address=self._address,
        )
        if self.pod is not None:
            resolver.pod = self.pod
        return resolver

    # tf.distribute.cluster_resolver.TPUClusterResolver's API.

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        del task_type, task_id, rpc_layer
        if self.pod is not None:
            return self.pod.master()
        return "" if self._address is None else "grpc://" + self._address

    def get_master(self):
        return self.master()

    def get_job_name(self):
        return self.task_type

    def get_coordination_service_leader(self):
        return "/job:" + self.get_job_name() + "/task:0"

    def cluster_spec(self):
        if self.pod is not None:
            return self.pod.cluster_spec()
        if self._address is None:
            return tf.train.ClusterSpec({})
        return tf.train.ClusterSpec({self.task_type: [self._address]})

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        """The cores of one host, as TF's (all of them on a one-host slice)."""
        del task_type, task_id, config_proto
        return {"TPU": self._num_cores // self._num_hosts}

    def get_tpu_system_metadata(self):
        device_attributes = _tf.DeviceAttributes
        devices = tuple(
            device_attributes(name, self._device_type, 0, 0) for name in self._core_devices
        )
        return _tf.TPUSystemMetadata(
            num_cores=self._num_cores,
            num_hosts=self._num_hosts,
            num_of_cores_per_host=self._num_cores // self._num_hosts,
            topology=None,  # As TF's: the topology comes from initialize_tpu_system.
            devices=devices,
        )

    def set_tpu_topology(self, serialized_tpu_topology):
        self._tpu_topology = _tf.TopologyProto()
        self._tpu_topology.ParseFromString(serialized_tpu_topology)

    @property
    def tpu_hardware_feature(self):
        if self._tpu_topology is None:
            return None
        return self._tpu_topology.tpu_hardware_feature

    @property
    def environment(self):
        return ""

    def __deepcopy__(self, memo):
        return self  # As TF's resolver: estimators deep-copy their config.

    # The fake's own parts.

    def tpu_topology(self):
        """The `tf.tpu.experimental.Topology` of this slice (one task, all cores)."""
        if self._topology is None:
            self._topology = _Topology(
                mesh_shape=list(self._mesh_shape),
                device_coordinates=topologies.device_coordinates(
                    self._mesh_shape, self._num_hosts
                ),
            )
        return self._topology

    def check_device_assignment(self, device_assignment):
        """Raises unless `device_assignment` fits this slice, as a TPU would.

        A `ValueError` for an assignment of another slice; TensorFlow's errors
        for coordinates off the mesh or a core named twice (see
        `_check_cores_named_once`).
        """
        if device_assignment is None:
            return None
        topology = device_assignment.topology
        mine = self.tpu_topology()
        if not (
            np.array_equal(topology.mesh_shape, mine.mesh_shape)
            and np.array_equal(topology.device_coordinates, mine.device_coordinates)
        ):
            raise ValueError(
                f"device_assignment was built for a TPU topology with mesh_shape="
                f"{topology.mesh_shape.tolist()} and {topology.num_tasks} task(s) x "
                f"{topology.num_tpus_per_task} cores, but this fake TPU is "
                f"{self._topology_name} with mesh_shape={list(self._mesh_shape)} "
                f"({self._num_cores} cores). Build it from this resolver's topology: "
                f"DeviceAssignment.build(initialize_tpu_system(resolver), ...)."
            )
        _check_cores_named_once(device_assignment)
        return device_assignment


# The backend of compat_distribute.TPUStrategy for this resolver (tpu.TPUBackend),
# loaded on first use: the strategy module imports this one.
setattr(
    FakeTPUClusterResolver,
    tpu.BACKEND_ATTRIBUTE,
    "compat_distribute.testing._fake_tpu.strategy:build",
)


def _check_job_name(job_name):
    """A job name: the job of the TPU's workers in `cluster_spec()` and the devices' names."""
    if not isinstance(job_name, str) or not job_name:
        raise ValueError(
            f"job_name must be a non-empty str, the job of the TPU's workers (TensorFlow's "
            f"default {JOB!r}); got {job_name!r}. Leave job_name out for {JOB!r}."
        )


def _check_address(address, pod):
    """`address` ("host:port" or None); refused for a pod, whose hosts have their own."""
    if address is None:
        return None
    host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
    if not host or not port.isdigit() or "/" in address:
        raise ValueError(
            f"address must be 'host:port' (for example '127.0.0.1:8470'); got {address!r}."
        )
    if pod is not None:
        raise ValueError(
            f"address applies to a one-host slice; got {address!r} for the pod {pod.name!r}, "
            f"whose hosts have their own addresses (see resolver.pod). Leave address out."
        )
    return address


class _Topology(tf.tpu.experimental.Topology):
    """The slice's `Topology`: a device coordinate past the mesh is an IndexError
    that names the coordinate and the mesh (TensorFlow's own lookup leaves numpy's
    bare "index 2 is out of bounds for axis 0 with size 2")."""

    def task_ordinal_at_coordinates(self, device_coordinates):
        self._check_on_mesh(device_coordinates)
        return super().task_ordinal_at_coordinates(device_coordinates)

    def tpu_device_ordinal_at_coordinates(self, device_coordinates):
        self._check_on_mesh(device_coordinates)
        return super().tpu_device_ordinal_at_coordinates(device_coordinates)

    def _check_on_mesh(self, device_coordinates):
        coordinates = tuple(int(v) for v in device_coordinates)
        bounds = tuple(int(v) for v in self.mesh_shape)
        # Negative coordinates wrap round in numpy; the TPU's compiler refuses
        # them at the strategy (see _check_cores_named_once), as TF does.
        if len(coordinates) == len(bounds) and all(c < b for c, b in zip(coordinates, bounds)):
            return
        raise IndexError(
            f"DeviceAssignment: core_assignment names the device coordinate "
            f"{_tuple_text(coordinates)}, outside of mesh shape {_tuple_text(bounds)} "
            f"(x, y, z, core: each from 0 to its size - 1). Take coordinates from "
            f"topology.device_coordinates, or let tf.tpu.experimental.DeviceAssignment."
            f"build(topology, computation_shape=..., num_replicas=...) choose them."
        )


def _check_cores_named_once(device_assignment):
    """TensorFlow's checks of an assignment's coordinates, with its errors.

    (A coordinate past the mesh is refused by `DeviceAssignment` itself, with
    an IndexError: see `_Topology`.) A negative one, which numpy's lookups wrap round, or a
    core named twice are refused by the TPU's compiler with
    InvalidArgumentError (tpu_rewrite_device_util.cc,
    GetGeneralTPUExecutionDeviceAssignment), at the first step; the fake
    refuses them when the strategy is built, as it runs a replica only on its
    logical core 0 and could not see them later.
    """
    topology = device_assignment.topology
    bounds = tuple(int(v) for v in topology.mesh_shape)
    used = set()
    for replica in range(device_assignment.num_replicas):
        for logical_core in range(device_assignment.num_cores_per_replica):
            coordinates = tuple(int(v) for v in device_assignment.coordinates(replica, logical_core))
            if any(c < 0 for c in coordinates):
                raise tf.errors.InvalidArgumentError(
                    None,
                    None,
                    f"device coordinate {_tuple_text(coordinates)} in 'device_assignment' is "
                    f"outside of mesh shape {_tuple_text(bounds)}",
                )
            if coordinates in used:
                raise tf.errors.InvalidArgumentError(
                    None,
                    None,
                    f"'device_assignment' has duplicate device coordinate "
                    f"{_tuple_text(coordinates)}",
                )
            used.add(coordinates)


def _tuple_text(values):
    return "(" + ", ".join(str(v) for v in values) + ")"
