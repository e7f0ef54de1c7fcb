"""The one adapter to TensorFlow internals used by the test harness.

The harness's counterpart of `compat_distribute._tf`, with the same rules: each
`tensorflow.python` object is named once in `INTERNALS` and imported on first
use; protected members are reached only through the functions below and listed
in `PROTECTED`; `tests/shims/test_tf_adapters.py` checks every entry against the
installed TensorFlow. Public TensorFlow API is used directly, not from here.
"""

import contextlib
import importlib
import itertools

from compat_distribute import _lazy

_DISTRIBUTE = "tensorflow.python.distribute"

INTERNALS = {
    "CollectiveAllReduceStrategy": f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceStrategy",
    "CollectiveAllReduceStrategyV1": f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceStrategyV1",
    # The fake TPU: TPUStrategy's own checks and members, reused word for word.
    "TPUExtended": f"{_DISTRIBUTE}.tpu_strategy:TPUExtended",
    "TPUStrategyV2": f"{_DISTRIBUTE}.tpu_strategy:TPUStrategyV2",
    "validate_run_function": f"{_DISTRIBUTE}.tpu_strategy:validate_run_function",
    "maybe_partial_apply_variables": f"{_DISTRIBUTE}.tpu_strategy:_maybe_partial_apply_variables",
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
    "regroup": f"{_DISTRIBUTE}.distribute_utils:regroup",
    # XLA check
    "get_all_registered_kernels": "tensorflow.python.framework.kernels:get_all_registered_kernels",
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
    # Fake TPU pods: a host's call in a step, instantiated without Grappler.
    "context": "tensorflow.python.eager.context:context",
    "FunctionCallOptions": "tensorflow.python.eager.context:FunctionCallOptions",
}

# (owner, protected member) that the functions below rely on; the member is on
# the owner class, or on an instance built with no arguments.
PROTECTED = (
    (f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceStrategy", "_collective_key_base"),
    (f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceStrategyV1", "_collective_key_base"),
    (f"{_DISTRIBUTE}.mirrored_strategy:MirroredStrategy", "_collective_key_base"),
    # The fake TPU.
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_check_spec"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_update_config_proto"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_configure"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_experimental_distribute_dataset"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_distribute_datasets_from_function"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_get_replica_order"),
    (f"{_DISTRIBUTE}.values:DistributedVariable", "_get_replica"),
    (f"{_DISTRIBUTE}.values:DistributedVariable", "_get_as_operand"),
    (f"{_DISTRIBUTE}.values:DistributedVariable", "_dense_var_to_tensor"),
    ("tensorflow.python.eager.polymorphic_function.polymorphic_function:Function", "_clone"),
    # XLA check
    ("tensorflow.python.framework.ops:Graph", "_get_function"),
    # Fake TPU pods; MirroredExtended's `_input_workers_devices` (set in its
    # __init__) is pinned by its own test.
    (f"{_DISTRIBUTE}.mirrored_strategy:MirroredExtended", "_input_workers_with_options"),
    # Fake TPU pods: V1 input iterators whose ops have run on the hosts.
    (f"{_DISTRIBUTE}.mirrored_strategy:MirroredExtended", "_make_dataset_iterator"),
    (f"{_DISTRIBUTE}.mirrored_strategy:MirroredExtended", "_make_input_fn_iterator"),
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


def collective_keys(extended):
    """MirroredExtended `extended`'s collective key allocator (group and instance keys).

    MirroredExtended sets `_collective_keys` in its __init__; pinned by its own test.
    """
    return extended._collective_keys


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


@contextlib.contextmanager
def calls_without_graph_optimizer():
    """Function calls added to a graph meanwhile are instantiated without TensorFlow's
    graph optimizer (Grappler): their call ops carry a config saying so."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    context = __getattr__("context")()
    options = context.function_call_options
    config = tf.compat.v1.ConfigProto.FromString(options.config_proto_serialized)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
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
