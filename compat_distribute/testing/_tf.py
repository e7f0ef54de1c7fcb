"""The one adapter to TensorFlow internals used by the test harness.

The counterpart of `compat_distribute._tf`, with the same rules; it also lists
the attributes borrowed TensorFlow methods read of the fake (`CALLBACKS`).
"""

import contextlib
import importlib
import itertools

from compat_distribute import _lazy
from compat_distribute import _tf as core_tf

_DISTRIBUTE = "tensorflow.python.distribute"

INTERNALS = {
    "CollectiveAllReduceStrategy": f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceStrategy",
    "CollectiveAllReduceStrategyV1": f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceStrategyV1",
    "CollectiveAllReduceExtended": f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceExtended",
    # The fake TPU: TPUStrategy's own checks and members, reused word for word.
    "TPUExtended": f"{_DISTRIBUTE}.tpu_strategy:TPUExtended",
    "TPUStrategyV2": f"{_DISTRIBUTE}.tpu_strategy:TPUStrategyV2",
    "validate_run_function": f"{_DISTRIBUTE}.tpu_strategy:validate_run_function",
    "maybe_partial_apply_variables": f"{_DISTRIBUTE}.tpu_strategy:_maybe_partial_apply_variables",
    "maybe_init_scope": f"{_DISTRIBUTE}.tpu_strategy:maybe_init_scope",
    "MirroredExtended": f"{_DISTRIBUTE}.mirrored_strategy:MirroredExtended",
    "Strategy": f"{_DISTRIBUTE}.distribute_lib:Strategy",
    "DistributedVariable": f"{_DISTRIBUTE}.values:DistributedVariable",
    "MirroredVariable": f"{_DISTRIBUTE}.values:MirroredVariable",
    "SyncOnReadVariable": f"{_DISTRIBUTE}.values:SyncOnReadVariable",
    "PerReplica": f"{_DISTRIBUTE}.values:PerReplica",
    # A step's outputs: a user's composite (an ExtensionType) comes back once per replica.
    "CompositeTensor": "tensorflow.python.framework.composite_tensor:CompositeTensor",
    "current_replica_id": f"{_DISTRIBUTE}.values_util:get_current_replica_id_as_int",
    "get_devices_from": f"{_DISTRIBUTE}.cross_device_ops:get_devices_from",
    "simple_broadcast": f"{_DISTRIBUTE}.cross_device_ops:simple_broadcast",
    "check_destinations": f"{_DISTRIBUTE}.cross_device_ops:check_destinations",
    "regroup": f"{_DISTRIBUTE}.distribute_utils:regroup",
    "Mirrored": f"{_DISTRIBUTE}.values:Mirrored",
    "canonicalize_device": f"{_DISTRIBUTE}.device_util:canonicalize",
    "connect_to_cluster": "tensorflow.python.eager.remote:connect_to_cluster",
    "connect_to_remote_host": "tensorflow.python.eager.remote:connect_to_remote_host",
    "DeviceAttributes": "tensorflow.python.client.session:_DeviceAttributes",
    "TPUSystemMetadata": "tensorflow.python.tpu.tpu_system_metadata:TPUSystemMetadata",
    "TopologyProto": "tensorflow.core.protobuf.tpu.topology_pb2:TopologyProto",
    "HardwareFeature": "tensorflow.python.tpu.tpu_hardware_feature:HardwareFeature",
    "variable_accessed": "tensorflow.python.eager.tape:variable_accessed",
    # The fake TPU's one trace per step
    "select_replica": f"{_DISTRIBUTE}.distribute_utils:select_replica",
    # Variables made in the one trace: their initial values lifted out of it, as tf.function does.
    "lift_to_graph": "tensorflow.python.eager.lift_to_graph:lift_to_graph",
    "UnliftableError": "tensorflow.python.ops.op_selector:UnliftableError",
    # XLA check
    "get_all_registered_kernels": "tensorflow.python.framework.kernels:get_all_registered_kernels",
    # Outside compilation in a fake TPU step: TF's implementation is routed to
    # the fake's; a split tensor's tiling is read from its annotation.
    "tpu_replication": "tensorflow.python.tpu.tpu_replication",
    "outside_compilation_impl": "tensorflow.python.tpu.tpu_replication:outside_compilation_impl",
    "get_tensor_sharding": "tensorflow.python.compiler.xla.experimental.xla_sharding:get_tensor_sharding",
    "get_sharding_tile_shape": "tensorflow.python.compiler.xla.experimental.xla_sharding:get_sharding_tile_shape",
    # Fake TPU pods
    "is_device_list_single_worker": f"{_DISTRIBUTE}.mirrored_strategy:_is_device_list_single_worker",
    # Fake TPU device assignments
    "host_for_device": f"{_DISTRIBUTE}.device_util:get_host_for_device",
    # Pod hosts' network: the client's own server, which the hosts call back.
    "get_server_def": "tensorflow.python.eager.context:get_server_def",
    # TensorFlow's logging module: TF's TPU warnings go through its `warning`,
    # looked up at each call (TF's tests patch it there).
    "tf_logging": "tensorflow.python.platform.tf_logging",
    # Waits until the hosts have run the ops this client sent them.
    "async_wait": "tensorflow.python.eager.context:async_wait",
    # The cluster's zygote forks only while no eager context exists (None).
    "context_safe": "tensorflow.python.eager.context:context_safe",
    # TF's TPU system calls, whatever name reached them (see _fake_tpu.system).
    "tpu_strategy_util": "tensorflow.python.tpu.tpu_strategy_util",
    # Fake TPU pods: a host's call in a step, instantiated without Grappler.
    "context": "tensorflow.python.eager.context:context",
    "FunctionCallOptions": "tensorflow.python.eager.context:FunctionCallOptions",
    # Fake TPU pods: the end of a host's data, which a one-call executor keeps.
    "execution_mode": "tensorflow.python.eager.context:execution_mode",
    "iterator_ops": "tensorflow.python.data.ops.iterator_ops",
}

# (owner, protected member) that the functions below rely on; the member is on
# the owner (a class or module), or on an instance built with no arguments.
PROTECTED = (
    (f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceStrategy", "_collective_key_base"),
    (f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceStrategyV1", "_collective_key_base"),
    (f"{_DISTRIBUTE}.mirrored_strategy:MirroredStrategy", "_collective_key_base"),
    # Whether a cluster task's runtime started (an op ran) while it imported a module.
    ("tensorflow.python.eager.context:Context", "_initialized"),
    # A cluster task's multi-worker strategies take its devices_per_worker CPUs.
    (f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceExtended", "_initialize_local_devices"),
    # The fake TPU.
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_check_spec"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_update_config_proto"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_configure"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_experimental_distribute_dataset"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_distribute_datasets_from_function"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_get_replica_order"),
    ("tensorflow.python.eager.polymorphic_function.polymorphic_function:Function", "_clone"),
    # XLA check
    ("tensorflow.python.framework.ops:Graph", "_get_function"),
    # A pod's client gives its context back the default device it had before connecting.
    ("tensorflow.python.eager.context:Context", "_set_device"),
    # ... and names the pool its hosts give its contexts there.
    ("tensorflow.python.eager.context:Context", "_inter_op_parallelism_threads"),
    # Fake TPU pods; MirroredExtended's `_input_workers_devices` (set in its
    # __init__) is pinned by its own test.
    (f"{_DISTRIBUTE}.mirrored_strategy:MirroredExtended", "_input_workers_with_options"),
    # What TensorFlow's own TPU system calls run; _fake_tpu/tf_calls.py routes a fake resolver.
    ("tensorflow.python.tpu.tpu_strategy_util", "initialize_tpu_system_impl"),
    ("tensorflow.python.tpu.tpu_strategy_util", "shutdown_tpu_system_impl"),
    # Fake TPU pods: an eager iterator's next element, read in a sync executor of its own.
    ("tensorflow.python.data.ops.iterator_ops:OwnedIterator", "_next_internal"),
)

_MIRRORED = f"{_DISTRIBUTE}.mirrored_strategy:MirroredExtended"
_TPU = f"{_DISTRIBUTE}.tpu_strategy:TPUExtended"
_VARIABLE = f"{_DISTRIBUTE}.values:DistributedVariable"

# (TensorFlow class, private method) that a class of the harness overrides. Were
# TensorFlow to rename one, the override would silently stop being called.
# tests/shims/test_tf_adapters.py checks that each still exists, and that every
# override in the package is a row here or in `compat_distribute._tf`.
OVERRIDES = (
    # The fake TPU's extended (FakeTPUExtended, ReplicatingExtended).
    (_MIRRORED, "_experimental_distribute_dataset"),
    (_MIRRORED, "_distribute_datasets_from_function"),
    (_MIRRORED, "_make_dataset_iterator"),
    (_MIRRORED, "_make_input_fn_iterator"),
    (_MIRRORED, "_configure"),
    (_MIRRORED, "_update_config_proto"),
    (_MIRRORED, "_in_multi_worker_mode"),
    (_MIRRORED, "_create_variable"),
    (_MIRRORED, "_call_for_each_replica"),
    (_MIRRORED, "_reduce_to"),
    (_MIRRORED, "_batch_reduce_to"),
    (_MIRRORED, "_broadcast_to"),
    (_MIRRORED, "_gather_to_implementation"),
    (_MIRRORED, "_update"),
    (_MIRRORED, "_update_non_slot"),
    (_MIRRORED, "_get_variable_creator_initial_value"),  # called for each copy
    # The replica context of the fake's one trace per step.
    (f"{_DISTRIBUTE}.distribute_lib:ReplicaContext", "_merge_call"),
    (f"{_DISTRIBUTE}.distribute_lib:ReplicaContext", "_replica_id"),
    # The fake's variables, read as TPU variables.
    (_VARIABLE, "_get_replica"),
    (_VARIABLE, "_use_packed_variable"),
    (_VARIABLE, "_get_as_operand"),
    (_VARIABLE, "_dense_var_to_tensor"),
)

# (TensorFlow method the fake borrows, attribute of the fake it reads, the
# TensorFlow versions that read it): the names TensorFlow's own code, run on
# the fake's objects, calls back. "extended." is read on the strategy's
# extended. Were TensorFlow to stop reading one, the fake's value would be
# silently ignored; tests/shims/test_tf_adapters.py checks each, and that
# every private name a borrowed method reads of the fake's is a row here.
CALLBACKS = (
    (f"{_TPU}._experimental_distribute_dataset", "_get_input_workers", ""),
    (f"{_TPU}._distribute_datasets_from_function", "_get_input_workers", ""),
    (f"{_TPU}._experimental_distribute_dataset", "_replica_order", "<2.16"),
    (f"{_TPU}._distribute_datasets_from_function", "_replica_order", "<2.16"),
    (f"{_TPU}._get_replica_order", "_enable_data_reorder", ">=2.16"),
    (f"{_TPU}._get_replica_order", "_tpu_devices", ">=2.16"),
    (f"{_TPU}._configure", "_update_config_proto", ""),
    (f"{_TPU}._update_config_proto", "_tpu_cluster_resolver", ""),
    (f"{_TPU}.experimental_logical_device", "_tpu_devices", ""),
    (f"{_TPU}.experimental_logical_device", "_logical_device_stack", ""),
    (f"{_TPU}.num_hosts", "_device_assignment", ""),
    (f"{_TPU}.num_hosts", "_tpu_metadata", ""),
    (f"{_TPU}.num_replicas_per_host", "_device_assignment", ""),
    (f"{_TPU}.num_replicas_per_host", "_tpu_metadata", ""),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUStrategyV2.experimental_assign_to_logical_device", "extended._tpu_devices", ""),
    (
        f"{_DISTRIBUTE}.tpu_strategy:TPUStrategyV2.experimental_assign_to_logical_device",
        "extended._use_spmd_for_xla_partitioning",
        "",
    ),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUStrategyV2.experimental_split_to_logical_devices", "extended._tpu_devices", ""),
)

__getattr__ = _lazy.adapter(__name__, INTERNALS)

# pylint: disable=protected-access

# Collectives pair up by instance key, and every strategy numbers its keys from
# a class-level `_collective_key_base`: two strategies in one process would
# reuse each other's keys ("Collective instance 101 expected type 0 ... but got
# type 1"). Each strategy built here takes the next range.
COLLECTIVE_KEY_RANGE = 100_000
_collective_key_bases = itertools.count(start=COLLECTIVE_KEY_RANGE, step=COLLECTIVE_KEY_RANGE)


def next_collective_key_base():
    """A collective key base no other strategy of this process uses."""
    return next(_collective_key_bases)


def give_own_collective_keys(strategy):
    """Sets `strategy`'s collective key base to a fresh range (before its first collective)."""
    strategy._collective_key_base = next_collective_key_base()


def give_next_multi_worker_strategies_own_keys():
    """The next multi-worker strategy built in this process takes a fresh key range.

    MultiWorkerMirroredStrategy reads the class attribute while it is built,
    so this sets the class attribute of both its V2 and V1 classes.
    """
    base = next_collective_key_base()
    __getattr__("CollectiveAllReduceStrategy")._collective_key_base = base
    __getattr__("CollectiveAllReduceStrategyV1")._collective_key_base = base


# MirroredExtended's collective key allocator; the core adapter names the member.
collective_keys = core_tf.collective_keys


def runtime_initialized():
    """Whether TensorFlow's runtime started in this process (an op ran, a
    device was listed): a context exists and is initialized."""
    context = __getattr__("context_safe")()
    return context is not None and context._initialized


def give_multi_worker_strategies_local_cpus(count):
    """Multi-worker strategies built in this process (a cluster task's) take
    `count` local CPU devices each, where TensorFlow gives a worker without
    GPUs or TPUs its first CPU alone, so that `num_replicas_in_sync` is
    workers x `count`."""
    extended = __getattr__("CollectiveAllReduceExtended")
    chosen = extended._initialize_local_devices

    def _initialize_local_devices(self, cluster_resolver, worker_device):
        devices, device_type = chosen(self, cluster_resolver, worker_device)
        if device_type == "CPU":
            devices = tuple(f"{worker_device}/device:CPU:{i}" for i in range(count))
        return devices, device_type

    extended._initialize_local_devices = _initialize_local_devices


def clone_function(function, python_function):
    """A copy of tf.function `function` (its options kept) around `python_function`."""
    return function._clone(python_function=python_function)


# XLA check


def graph_function(graph, name):
    """The function called `name` in `graph`'s function library, or None."""
    return graph._get_function(name)


# Fake TPU pods


@contextlib.contextmanager
def devices_of_several_hosts_allowed():
    """MirroredStrategy accepts a device list spanning hosts while this is entered.

    Stock MirroredStrategy refuses such a list in eager mode ("In-graph
    multi-worker training ... not supported in eager mode") by this one check;
    everything past it works on remote devices.
    """
    module = importlib.import_module(f"{_DISTRIBUTE}.mirrored_strategy")
    original = module._is_device_list_single_worker
    if original is not __getattr__("is_device_list_single_worker"):
        raise RuntimeError(
            "MirroredStrategy's device check is replaced already (a pod strategy being built "
            "in another thread?); build fake TPU pod strategies one at a time."
        )
    module._is_device_list_single_worker = lambda devices: True
    try:
        yield
    finally:
        module._is_device_list_single_worker = original


def without_graph_optimizer(config):
    """A copy of ConfigProto `config` with TensorFlow's graph optimizer (Grappler)
    off, unless `config` sets any of its options (as
    tf.config.optimizer.set_experimental_options does): then `config` unchanged,
    the user's choice."""
    config = type(config).FromString(config.SerializeToString())
    rewrite_options = config.graph_options.rewrite_options
    if not rewrite_options.ListFields():
        rewrite_options.disable_meta_optimizer = True
    return config


@contextlib.contextmanager
def calls_without_graph_optimizer():
    """Function calls added to a graph meanwhile are instantiated without TensorFlow's
    graph optimizer (Grappler), unless the user set its options: their call ops
    carry a config saying so (`without_graph_optimizer`)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    context = __getattr__("context")()
    options = context.function_call_options
    config = without_graph_optimizer(tf.compat.v1.ConfigProto.FromString(options.config_proto_serialized))
    context.function_call_options = __getattr__("FunctionCallOptions")(
        executor_type=options.executor_type, config_proto=config
    )
    try:
        yield
    finally:
        context.function_call_options = options


def set_input_workers(extended, host_devices):
    """Gives MirroredExtended `extended` one input pipeline per (host CPU, its devices) pair."""
    extended._input_workers_devices = tuple(
        (host, tuple(devices)) for host, devices in host_devices
    )


def input_workers_with_options(extended, options):
    """MirroredExtended `extended`'s input pipelines for `options` (TPUExtended's `_get_input_workers`)."""
    return extended._input_workers_with_options(options)


def default_device():
    """This thread's default device of the eager context (name, spec), which
    `experimental_connect_to_cluster` sets to the master's for good."""
    ctx = __getattr__("context")()
    return ctx.device_name, ctx.device_spec


def set_default_device(device):
    """Sets this thread's default device back to `device` (from `default_device`)."""
    __getattr__("context")()._set_device(*device)


@contextlib.contextmanager
def remote_contexts_inter_op_threads(at_least):
    """Contexts this process opens on servers meanwhile (connecting) get an
    inter-op pool of `at_least` threads where its own config names fewer; its
    own pool, started already, keeps its size. Nothing changes where the config
    names no size (each server then picks its own)."""
    ctx = __getattr__("context")()
    chosen = ctx._inter_op_parallelism_threads
    if chosen and chosen < at_least:
        ctx._inter_op_parallelism_threads = at_least
    try:
        yield
    finally:
        ctx._inter_op_parallelism_threads = chosen


def clear_errors_of_call_executors(error):
    """Clears the error that each executor `context.execution_mode` made for the
    call that raised `error` still holds.

    An op run on a remote host leaves its error on the executor that ran it,
    also a sync one; an eager iterator reads its next element in an executor of
    its own, which the traceback keeps. Deleted with the error still there, it
    raises it again: "Exception ignored in: Executor.__del__ ... OutOfRangeError:
    End of sequence" at the end of a host's data.
    """
    scope_code = __getattr__("execution_mode").__wrapped__.__code__
    while error is not None:
        traceback = error.__traceback__
        while traceback is not None:
            frame = traceback.tb_frame
            if frame.f_code is scope_code and frame.f_locals.get("executor_new") is not None:
                frame.f_locals["executor_new"].clear_error()
            traceback = traceback.tb_next
        error = error.__context__
