"""A TPU that lives on virtual CPU devices and refuses what a real TPU refuses.

`FakeTPUClusterResolver` describes a one-host TPU slice (a preset such as
"v3-8", or any mesh); `compat_distribute.TPUStrategy` and `FakeTPUStrategy`
turn it into a strategy with one replica per core (or per the device
assignment) on `cores` logical devices. `fake_tpu()` routes TensorFlow's TPU
entry points to the fake, so unmodified TPU code runs on it.

The strategy is a `tf.distribute.MirroredStrategy` underneath, never a
TPUStrategy: TensorFlow and Keras look for TPUStrategy classes to decide to
emit TPU-only ops, which would fail on a CPU. The TPU's own checks are TF's
own code where TF has them as functions (`validate_run_function`, the
logical-device annotations), so error texts are TensorFlow's, word for word.
"""

import itertools
import types

import numpy as np
import tensorflow as tf
from tensorflow.python.client import session as _session_lib
from tensorflow.python.distribute import distribute_lib as _distribute_lib
from tensorflow.python.distribute import mirrored_strategy as _mirrored
from tensorflow.python.distribute import tpu_strategy as _tf_tpu
from tensorflow.python.distribute import values as _values
from tensorflow.python.eager import context as _context
from tensorflow.python.eager import remote as _remote
from tensorflow.python.tpu import topology as _topology_lib
from tensorflow.python.tpu import tpu_system_metadata as _metadata_lib
from tensorflow.core.protobuf.tpu import topology_pb2 as _topology_pb2

from compat_distribute import _members
from compat_distribute import _patching
from compat_distribute import _steps
from compat_distribute import _validate
from compat_distribute.testing import devices as _devices

# Mesh shapes (x, y, z, cores per chip) of one-host slices, as the TPU system
# reports them to TensorFlow.
TOPOLOGIES = types.MappingProxyType(
    {
        "v2-8": (2, 2, 1, 2),
        "v3-8": (2, 2, 1, 2),
        "v4-8": (2, 2, 1, 1),
    }
)
DEFAULT_TOPOLOGY = "v3-8"
_JOB = "worker"


def _mesh(topology, mesh_shape):
    """(name, mesh) for the constructor arguments; raises before any state changes."""
    if mesh_shape is None:
        if not isinstance(topology, str):
            raise TypeError(
                f"topology must be a preset name (one of {sorted(TOPOLOGIES)}); got "
                f"{topology!r} ({type(topology).__name__}). Pass mesh_shape=(x, y, z, "
                f"cores_per_chip) for another mesh."
            )
        if topology not in TOPOLOGIES:
            raise ValueError(
                f"Unknown TPU topology {topology!r}; the presets are "
                f"{', '.join(repr(t) for t in TOPOLOGIES)}. Pass mesh_shape=(x, y, z, "
                f"cores_per_chip) for another mesh."
            )
        return topology, TOPOLOGIES[topology]
    if topology not in (None, DEFAULT_TOPOLOGY):
        raise ValueError(
            f"Pass either topology= or mesh_shape=, not both; got topology={topology!r} "
            f"and mesh_shape={mesh_shape!r}."
        )
    try:
        mesh = tuple(mesh_shape)
    except TypeError:
        mesh = None
    if (
        mesh is None
        or len(mesh) != 4
        or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in mesh)
    ):
        raise ValueError(
            f"mesh_shape must be four positive ints (x, y, z, cores_per_chip); got "
            f"{mesh_shape!r}. For example mesh_shape=(2, 2, 1, 2) is a v3-8 (8 cores)."
        )
    mesh = tuple(int(v) for v in mesh)
    _devices.check_count(f"mesh_shape {mesh}'s core count", int(np.prod(mesh, dtype=object)))
    return "mesh" + "x".join(str(v) for v in mesh), mesh


def _device_coordinates(mesh):
    """Physical coordinates of cores 0..n-1 of the one host, cores of a chip adjacent."""
    x_size, y_size, z_size, c_size = mesh
    coords = [
        (x, y, z, c)
        for z, y, x, c in itertools.product(
            range(z_size), range(y_size), range(x_size), range(c_size)
        )
    ]
    return np.array([coords], dtype=np.int32)


class FakeTPUClusterResolver(tf.distribute.cluster_resolver.ClusterResolver):
    """A one-host TPU slice of `topology` (or `mesh_shape`) on logical devices.

    Answers like `TPUClusterResolver(tpu="local")` on a TPU host with that
    slice: `num_accelerators()` is `{"TPU": cores}`, `master()` is "",
    `cluster_spec()` is empty, `get_tpu_system_metadata()` reports one host
    with all cores. The cores are the first `cores` logical `device_type`
    devices; they are created here when TensorFlow has not started yet (see
    `compat_distribute.testing.set_virtual_devices`). `strict=True` makes the
    strategy check step functions for TPU (XLA) compatibility when traced.
    """

    def __init__(
        self,
        topology=DEFAULT_TOPOLOGY,
        *,
        mesh_shape=None,
        strict=False,
        device_type="CPU",
        job_name=_JOB,
    ):
        self._topology_name, self._mesh_shape = _mesh(topology, mesh_shape)
        if device_type not in _devices.DEVICE_TYPES:
            raise ValueError(
                f"device_type must be one of {_devices.DEVICE_TYPES}; got "
                f"{device_type!r}. The fake TPU's cores are logical CPU (or GPU) devices."
            )
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be True or False; got {strict!r}.")
        self._num_cores = int(np.prod(self._mesh_shape))
        self._strict = strict
        self._device_type = device_type
        self._core_devices = tuple(_devices.set_virtual_devices(self._num_cores, device_type))
        self._tpu = f"fake-{self._topology_name}"  # TF's initialize_tpu_system keys on this.
        self.task_type = job_name
        self.task_id = 0
        self._tpu_topology = None  # The serialized proto, once initialized (as in TF).
        self._topology = None

    def __repr__(self):
        return (
            f"FakeTPUClusterResolver({self._topology_name!r}, mesh_shape={self._mesh_shape}, "
            f"cores={self._num_cores}, device_type={self._device_type!r})"
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
    def strict(self):
        return self._strict

    @property
    def device_type(self):
        return self._device_type

    @property
    def core_devices(self):
        """The logical devices that stand in for TPU cores 0..cores-1."""
        return self._core_devices

    # tf.distribute.cluster_resolver.TPUClusterResolver's API.

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        del task_type, task_id, rpc_layer
        return ""

    def get_master(self):
        return self.master()

    def get_job_name(self):
        return self.task_type

    def get_coordination_service_leader(self):
        return "/job:" + self.get_job_name() + "/task:0"

    def cluster_spec(self):
        return tf.train.ClusterSpec({})

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        del task_type, task_id, config_proto
        return {"TPU": self._num_cores}

    def get_tpu_system_metadata(self):
        devices = tuple(
            _session_lib._DeviceAttributes(
                name, self._device_type, 0, 0
            )  # pylint: disable=protected-access
            for name in self._core_devices
        )
        return _metadata_lib.TPUSystemMetadata(
            num_cores=self._num_cores,
            num_hosts=1,
            num_of_cores_per_host=self._num_cores,
            topology=None,  # As TF's: the topology comes from initialize_tpu_system.
            devices=devices,
        )

    def set_tpu_topology(self, serialized_tpu_topology):
        self._tpu_topology = _topology_pb2.TopologyProto()
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
            self._topology = _topology_lib.Topology(
                mesh_shape=list(self._mesh_shape),
                device_coordinates=_device_coordinates(self._mesh_shape),
            )
        return self._topology

    def check_device_assignment(self, device_assignment):
        """Raises `ValueError` unless `device_assignment` fits this slice."""
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
        needed = device_assignment.num_replicas * device_assignment.num_cores_per_replica
        if needed > self._num_cores:
            raise ValueError(
                f"device_assignment needs {device_assignment.num_replicas} replicas x "
                f"{device_assignment.num_cores_per_replica} cores = {needed} cores, but this "
                f"fake TPU ({self._topology_name}) has {self._num_cores}."
            )
        return device_assignment

    def compat_distribute_strategy(
        self, *, steps_per_run, device_assignment, spmd_xla_partitioning
    ):
        """The backend seam of `compat_distribute.TPUStrategy`: a `FakeTPUStrategy`."""
        return FakeTPUStrategy._build(  # pylint: disable=protected-access
            self, device_assignment, spmd_xla_partitioning, steps_per_run
        )


def _is_fake(resolver):
    return isinstance(resolver, FakeTPUClusterResolver)


# The fake TPU in force (innermost `fake_tpu()`), for calls that pass no resolver.
_ACTIVE = []


def _default_resolver():
    if _ACTIVE:
        return _ACTIVE[-1].resolver()
    return FakeTPUClusterResolver()


def _fake_resolver(name, resolver):
    if resolver is None:
        return _default_resolver()
    if not _is_fake(resolver):
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
    """
    resolver = _fake_resolver("cluster_resolver", cluster_resolver)
    topology = resolver.tpu_topology()
    resolver.set_tpu_topology(topology.serialized())
    return topology


def shutdown_tpu_system(cluster_resolver=None):
    """`tf.tpu.experimental.shutdown_tpu_system` for a fake TPU."""
    resolver = _fake_resolver("cluster_resolver", cluster_resolver)
    resolver._tpu_topology = None  # pylint: disable=protected-access


def _connect_to_cluster(cluster_spec_or_resolver, *args, **kwargs):
    """`tf.config.experimental_connect_to_cluster`: a fake TPU is local already."""
    if _is_fake(cluster_spec_or_resolver):
        return None
    return _remote.connect_to_cluster(cluster_spec_or_resolver, *args, **kwargs)


class FakeTPUExtended(_mirrored.MirroredExtended):
    """MirroredExtended over the first logical core of each replica, with TPU rules."""

    def __init__(self, container_strategy, resolver, device_assignment, spmd, steps_per_run):
        cores = resolver.core_devices
        if device_assignment is None:
            tpu_devices = [[d] for d in cores]
        else:
            tpu_devices = [
                [
                    cores[device_assignment.tpu_ordinal(replica=r, logical_core=c)]
                    for c in range(device_assignment.num_cores_per_replica)
                ]
                for r in range(device_assignment.num_replicas)
            ]
        # [replica][logical core] -> device, as TPUExtended's.
        self._tpu_devices = np.array(tpu_devices, dtype=object)
        super().__init__(container_strategy, devices=list(self._tpu_devices[:, 0]))
        self._tpu_cluster_resolver = resolver
        self._tpu_metadata = resolver.get_tpu_system_metadata()
        self._device_assignment = device_assignment
        self._use_spmd_for_xla_partitioning = spmd
        self.steps_per_run = steps_per_run
        # As TPUExtended: static shapes wanted; partial batches of finite
        # datasets with a dynamic batch dimension are padded per replica.
        self._require_static_shapes = True
        self.experimental_enable_get_next_as_optional = True
        self._logical_device_stack = [0]

    @property
    def strict(self):
        return self._tpu_cluster_resolver.strict

    # TPUExtended's own code, which only reads the attributes set above.
    num_hosts = _tf_tpu.TPUExtended.num_hosts
    num_replicas_per_host = _tf_tpu.TPUExtended.num_replicas_per_host
    experimental_logical_device = _tf_tpu.TPUExtended.experimental_logical_device
    _check_spec = _tf_tpu.TPUExtended._check_spec  # pylint: disable=protected-access

    @property
    def worker_devices(self):
        return tuple(self._tpu_devices[:, self._logical_device_stack[-1]])

    @property
    def parameter_devices(self):
        return self.worker_devices

    @property
    def tpu_hardware_feature(self):
        from tensorflow.python.tpu import tpu_hardware_feature

        return tpu_hardware_feature.HardwareFeature(self._tpu_cluster_resolver.tpu_hardware_feature)

    def _create_variable(self, next_creator, **kwargs):
        # Inside experimental_logical_device(k), variables live on core k of each
        # replica, as on a TPU.
        core = self._logical_device_stack[-1]
        if core and kwargs.get("colocate_with") is None:
            kwargs["colocate_with"] = types.SimpleNamespace(
                _devices=tuple(self._tpu_devices[:, core])
            )
        return super()._create_variable(next_creator, **kwargs)

    def _experimental_distribute_dataset(self, dataset, options):
        if (
            options
            and options.experimental_replication_mode
            == _distribute_lib.InputReplicationMode.PER_REPLICA
        ):
            raise NotImplementedError(
                "InputReplicationMode.PER_REPLICA "
                "is only supported in "
                "`experimental_distribute_datasets_from_function`."
            )
        if options is None or options.experimental_fetch_to_device:
            self._check_spec(dataset.element_spec)
        return super()._experimental_distribute_dataset(dataset, options)

    def _distribute_datasets_from_function(self, dataset_fn, options):
        if (
            options
            and options.experimental_replication_mode
            == _distribute_lib.InputReplicationMode.PER_REPLICA
        ):
            raise NotImplementedError(
                "InputReplicationMode.PER_REPLICA "
                "is only supported in "
                " `experimental_distribute_datasets_from_function` "
                "of tf.distribute.MirroredStrategy"
            )
        distributed = super()._distribute_datasets_from_function(dataset_fn, options)
        if options is None or options.experimental_fetch_to_device:
            self._check_spec(distributed.element_spec)
        return distributed

    def _in_multi_worker_mode(self):
        return False


_members.serve(FakeTPUExtended, _members.TPU, _members.EXTENDED)

# Each fake strategy gets its own collective keys, so strategies over
# different device sets never share a collective group.
_COLLECTIVE_KEY_BASES = itertools.count(start=100_000, step=100_000)


class FakeTPUStrategy(_steps.RunStepsMixin, tf.distribute.MirroredStrategy):
    """`tf.distribute.TPUStrategy` on a `FakeTPUClusterResolver`'s logical devices.

    Same signature as TF2's TPUStrategy. One replica per core, or per replica of
    `experimental_device_assignment`; each replica runs on the device of its
    logical core 0 (the other cores of a replica are annotated, as XLA sees
    them, but do not compute). Serves the V1 members of the member table, and
    `run_steps` (see `compat_distribute`'s README).
    """

    def __init__(
        self,
        tpu_cluster_resolver=None,
        experimental_device_assignment=None,
        experimental_spmd_xla_partitioning=False,
    ):
        self._init(
            tpu_cluster_resolver,
            experimental_device_assignment,
            experimental_spmd_xla_partitioning,
            steps_per_run=1,
        )

    @classmethod
    def _build(cls, resolver, device_assignment, spmd, steps_per_run):
        strategy = cls.__new__(cls)
        FakeTPUStrategy._init(strategy, resolver, device_assignment, spmd, steps_per_run)
        return strategy

    def _init(self, resolver, device_assignment, spmd, steps_per_run):
        resolver = _fake_resolver("tpu_cluster_resolver", resolver)
        _validate.device_assignment(device_assignment)
        resolver.check_device_assignment(device_assignment)
        if not isinstance(spmd, bool):
            raise TypeError(
                f"experimental_spmd_xla_partitioning must be True or False; got {spmd!r}."
            )
        self._collective_key_base = next(_COLLECTIVE_KEY_BASES)
        extended = FakeTPUExtended(self, resolver, device_assignment, spmd, steps_per_run)
        # Skips MirroredStrategy.__init__, which would build a MirroredExtended.
        _distribute_lib.Strategy.__init__(self, extended)
        self._checked_keys = set()  # step functions strict mode checked
        self._checked_calls = set()  # (fn, arity) whose run arguments passed

    # Not marked do_not_convert: that would also switch AutoGraph off for `fn`.
    def run(self, fn, args=(), kwargs=None, options=None):
        """`TPUStrategy.run`: `fn` must be a `tf.function` or run inside one."""
        _tf_tpu.validate_run_function(fn)
        # TPUStrategy's argument checks (variables in *args, too many args).
        self._check_run_arguments(fn, args, kwargs)
        self._check_traced(fn, args, kwargs)
        return super().run(fn, args=args, kwargs=kwargs, options=options)

    def _check_run_arguments(self, fn, args, kwargs):
        """TPUStrategy.run's argument checks: variables in *args, too many args.

        TF's check inspects `fn`'s signature; an eager call repeating a passed
        (fn, arity) without variables skips it, to keep `run` as cheap as
        MirroredStrategy's.
        """
        key = None
        if _context.executing_eagerly() and not any(
            _is_distributed_variable(a) for a in (*args, *(kwargs or {}).values())
        ):
            key = (_steps._fn_key(fn), len(args), tuple(kwargs or ()))
            try:
                if key in self._checked_calls:
                    return
            except TypeError:  # unhashable callable
                key = None
        _tf_tpu._maybe_partial_apply_variables(fn, args, kwargs)  # pylint: disable=protected-access
        if key is not None:
            self._checked_calls.add(key)

    def _check_traced(self, fn, args, kwargs):
        """Strict mode: checks `fn` compiles for a TPU, once per step function.

        Called whenever `run` is called, which inside a `tf.function` is at
        trace time. Does nothing unless the resolver is strict.
        """
        if not self.extended.strict:
            return
        key = _steps._fn_key(fn)  # pylint: disable=protected-access
        try:
            if key in self._checked_keys:
                return
            self._checked_keys.add(key)
        except TypeError:  # unhashable callable: check every time.
            pass
        from compat_distribute.testing import xla_check

        # Traced as strategy.run would trace it, inside the caller's trace, so
        # distributed arguments are captured as they are. The nested run finds
        # `fn` checked already.
        xla_check.ensure_tpu_compatible(fn, args, kwargs, strategy=self)

    @property
    def cluster_resolver(self):
        return self.extended._tpu_cluster_resolver  # pylint: disable=protected-access

    # TPUStrategyV2's own code; reads extended._tpu_devices and
    # extended._use_spmd_for_xla_partitioning.
    experimental_assign_to_logical_device = (
        _tf_tpu.TPUStrategyV2.experimental_assign_to_logical_device
    )
    experimental_split_to_logical_devices = (
        _tf_tpu.TPUStrategyV2.experimental_split_to_logical_devices
    )
    experimental_replicate_to_logical_devices = (
        _tf_tpu.TPUStrategyV2.experimental_replicate_to_logical_devices
    )


def _is_distributed_variable(value):
    flat = tf.nest.flatten(value)
    return bool(flat) and isinstance(flat[0], _values.DistributedVariable)


_members.serve(FakeTPUStrategy, _members.TPU, _members.STRATEGY)


class _ExperimentalFakeTPUStrategy(FakeTPUStrategy):
    """`tf.distribute.experimental.TPUStrategy(tpu_cluster_resolver, device_assignment)`."""

    def __init__(self, tpu_cluster_resolver=None, device_assignment=None):
        super().__init__(tpu_cluster_resolver, experimental_device_assignment=device_assignment)


class _FakeTPUStrategyV1(FakeTPUStrategy):
    """`tf.compat.v1.distribute.experimental.TPUStrategy`'s signature on the fake."""

    def __init__(self, tpu_cluster_resolver=None, steps_per_run=None, device_assignment=None):
        steps = _validate.steps_per_run(steps_per_run)
        self._init(tpu_cluster_resolver, device_assignment, False, steps_per_run=steps)


class FakeTPU:
    """Routes TensorFlow's TPU entry points to a fake TPU; `stop()` restores them.

    While started, `tf.distribute.cluster_resolver.TPUClusterResolver(...)`
    returns a `FakeTPUClusterResolver` of this topology (whatever `tpu=` names),
    `tf.config.experimental_connect_to_cluster` accepts it, the
    `tf.tpu.experimental` system calls are `initialize_tpu_system` /
    `shutdown_tpu_system`, and `tf.distribute.TPUStrategy`,
    `tf.distribute.experimental.TPUStrategy` and
    `tf.compat.v1.distribute.experimental.TPUStrategy` build fake strategies.
    A context manager, and `start()`/`stop()` as in chex.
    """

    def __init__(
        self, topology=DEFAULT_TOPOLOGY, *, mesh_shape=None, strict=False, device_type="CPU"
    ):
        _mesh(topology, mesh_shape)  # Bad input fails here, not at start().
        self._config = dict(
            topology=topology, mesh_shape=mesh_shape, strict=strict, device_type=device_type
        )
        self._resolver_class = _resolver_class(self)
        self._patch = _patching.Patch(self._routes())

    def resolver(self, job_name=_JOB):
        """A new `FakeTPUClusterResolver` of this fake's topology."""
        return FakeTPUClusterResolver(job_name=job_name, **self._config)

    def _routes(self):
        routes = []
        for root in ("", "compat.v2."):
            routes += [
                (root + "distribute.cluster_resolver", "TPUClusterResolver", self._resolver_class),
                (root + "tpu.experimental", "initialize_tpu_system", initialize_tpu_system),
                (root + "tpu.experimental", "shutdown_tpu_system", shutdown_tpu_system),
                (root + "config", "experimental_connect_to_cluster", _connect_to_cluster),
                (root + "distribute", "TPUStrategy", FakeTPUStrategy),
                (root + "distribute.experimental", "TPUStrategy", _ExperimentalFakeTPUStrategy),
            ]
        routes += [
            ("compat.v1.distribute.cluster_resolver", "TPUClusterResolver", self._resolver_class),
            ("compat.v1.tpu.experimental", "initialize_tpu_system", initialize_tpu_system),
            ("compat.v1.tpu.experimental", "shutdown_tpu_system", shutdown_tpu_system),
            ("compat.v1.config", "experimental_connect_to_cluster", _connect_to_cluster),
            ("compat.v1.distribute.experimental", "TPUStrategy", _FakeTPUStrategyV1),
        ]
        return routes

    @property
    def active(self):
        return self._patch.active

    def start(self):
        self._patch.start()
        _ACTIVE.append(self)
        return self

    def stop(self):
        if not self.active:
            return
        self._patch.stop()
        _ACTIVE.remove(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()


def _resolver_class(fake):
    """`TPUClusterResolver` with TF's signature, building `fake`'s resolvers."""

    class TPUClusterResolver(FakeTPUClusterResolver):  # pylint: disable=redefined-outer-name
        """`tf.distribute.cluster_resolver.TPUClusterResolver` inside `fake_tpu()`."""

        def __init__(
            self,
            tpu=None,
            zone=None,
            project=None,
            job_name=_JOB,
            coordinator_name=None,
            coordinator_address=None,
            credentials="default",
            service=None,
            discovery_url=None,
        ):
            del tpu, zone, project, coordinator_name, coordinator_address
            del credentials, service, discovery_url
            super().__init__(job_name=job_name, **fake._config)  # pylint: disable=protected-access

        @staticmethod
        def connect(tpu=None, zone=None, project=None):
            resolver = TPUClusterResolver(tpu, zone, project)
            initialize_tpu_system(resolver)
            return resolver

    return TPUClusterResolver


def fake_tpu(topology=DEFAULT_TOPOLOGY, *, mesh_shape=None, strict=False, device_type="CPU"):
    """A `FakeTPU`: `with fake_tpu("v3-8"): ...` runs unmodified TPU code on CPUs."""
    return FakeTPU(topology, mesh_shape=mesh_shape, strict=strict, device_type=device_type)
