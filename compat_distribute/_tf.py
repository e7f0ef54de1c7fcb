"""The one adapter to TensorFlow internals used by the core.

Each internal is named once (`INTERNALS`, `PROTECTED`, and the private methods
the core overrides in `OVERRIDES`) and checked against the installed TensorFlow,
so an upgrade names what moved.
"""

from compat_distribute import _lazy

_DISTRIBUTE = "tensorflow.python.distribute"
_COLLECTIVE = f"{_DISTRIBUTE}.collective_all_reduce_strategy"

INTERNALS = {
    # The TF2 classes the shims subclass.
    "TPUStrategyV2": f"{_DISTRIBUTE}.tpu_strategy:TPUStrategyV2",
    "TPUExtended": f"{_DISTRIBUTE}.tpu_strategy:TPUExtended",
    "CollectiveAllReduceStrategy": f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceStrategy",
    "CollectiveAllReduceExtended": f"{_DISTRIBUTE}.collective_all_reduce_strategy:CollectiveAllReduceExtended",
    "MirroredExtended": f"{_DISTRIBUTE}.mirrored_strategy:MirroredExtended",
    # Base implementations the V1 members call past TF2's overrides.
    "StrategyBase": f"{_DISTRIBUTE}.distribute_lib:StrategyBase",
    "StrategyExtendedV2": f"{_DISTRIBUTE}.distribute_lib:StrategyExtendedV2",
    # Collective communication, as TF1 named it.
    "CollectiveCommunication": f"{_DISTRIBUTE}.collective_util:CollectiveCommunication",
    "CommunicationImplementation": f"{_DISTRIBUTE}.collective_util:CommunicationImplementation",
    "CommunicationOptions": f"{_DISTRIBUTE}.collective_util:Options",
    "check_destinations": f"{_DISTRIBUTE}.cross_device_ops:check_destinations",
    # The V1 multi-step loop's context object.
    "MultiStepContext": f"{_DISTRIBUTE}.input_lib:MultiStepContext",
    # Keras: the graph whose call-time captures multi_step_fix() moves out of
    # control flow (keras-team/keras#19246).
    "FuncGraph": "tensorflow.python.framework.func_graph:FuncGraph",
    # TPU discovery: what TPUClusterResolver() reads from the environment.
    "TPUClient": "tensorflow.python.tpu.client.client:Client",
    # Legacy programs: AutoGraph's map from generated code to the user's lines,
    # a stack of mappers per thread.
    "source_mapper_stacks": "tensorflow.python.util.tf_stack:_source_mapper_stacks",
    # Legacy programs: per-replica values of a TF1 graph loop, regrouped.
    "regroup": f"{_DISTRIBUTE}.distribute_utils:regroup",
    # Keras: the all-reduce whose instance key is a call-time capture, and the
    # launcher whose bound `_next_instance_key` is that capture's closure.
    "CollectiveAllReduce": f"{_DISTRIBUTE}.cross_device_ops:CollectiveAllReduce",
    "CollectiveReplicaLauncher": f"{_DISTRIBUTE}.cross_device_utils:CollectiveReplicaLauncher",
    # Distributed input: where MultiDeviceIterator builds its per-device pipelines.
    "multi_device_iterator_ops": "tensorflow.python.data.ops.multi_device_iterator_ops",
}

# (owner, protected member) that the functions below rely on; the member is on
# the owner class, or on an instance built with no arguments.
PROTECTED = (
    (f"{_DISTRIBUTE}.input_lib:MultiStepContext", "_set_last_step_outputs"),
    (f"{_DISTRIBUTE}.input_lib:MultiStepContext", "_last_step_outputs_reduce_ops"),
    (f"{_DISTRIBUTE}.input_lib:MultiStepContext", "_non_tensor_outputs"),
    (f"{_DISTRIBUTE}.distribute_lib:StrategyExtendedV2", "_make_dataset_iterator"),
    (f"{_DISTRIBUTE}.distribute_lib:StrategyExtendedV2", "_make_input_fn_iterator"),
    (f"{_DISTRIBUTE}.distribute_lib:StrategyExtendedV2", "_configure"),
    (f"{_DISTRIBUTE}.distribute_lib:StrategyExtendedV2", "_container_strategy"),
    # Legacy programs: TF's own TF1 graph loop on a real TPU.
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_experimental_run_steps_on_iterator"),
    # Keras: which cross-device op all-reduces a strategy's float values.
    (f"{_DISTRIBUTE}.mirrored_strategy:MirroredExtended", "_get_cross_device_ops"),
    # Keras: the call-time capture of a collective's instance key (its
    # `_collective_keys`, and MirroredExtended's, are pinned by their own test).
    (f"{_DISTRIBUTE}.cross_device_utils:CollectiveReplicaLauncher", "_next_instance_key"),
    # Distributed input: the builder of each device's prefetching pipeline.
    ("tensorflow.python.data.ops.multi_device_iterator_ops", "_create_device_dataset"),
)

# (TensorFlow class, private method) that a class of the core overrides. Were
# TensorFlow to rename one, the override would silently stop being called.
# tests/shims/test_tf_adapters.py checks that each still exists, and that every
# override in the package is a row here or in `compat_distribute.testing._tf`.
OVERRIDES = (
    # _input.QuietInputMixin: distributed input with no autotuning thread.
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_experimental_distribute_dataset"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_distribute_datasets_from_function"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_make_dataset_iterator"),
    (f"{_DISTRIBUTE}.tpu_strategy:TPUExtended", "_make_input_fn_iterator"),
    (f"{_COLLECTIVE}:CollectiveAllReduceExtended", "_experimental_distribute_dataset"),
    (f"{_COLLECTIVE}:CollectiveAllReduceExtended", "_distribute_datasets_from_function"),
    (f"{_COLLECTIVE}:CollectiveAllReduceExtended", "_make_dataset_iterator"),
    (f"{_COLLECTIVE}:CollectiveAllReduceExtended", "_make_input_fn_iterator"),
    # multi_worker._CollectiveExtended: a worker's one device as the destination.
    (f"{_COLLECTIVE}:CollectiveAllReduceExtended", "_batch_reduce_to"),
)

__getattr__ = _lazy.adapter(__name__, INTERNALS)

# pylint: disable=protected-access


def multi_step_context(last_step_outputs, reduce_ops, non_tensor_outputs):
    """A `MultiStepContext` holding the outputs of a finished multi-step loop."""
    ctx = __getattr__("MultiStepContext")()
    ctx._set_last_step_outputs(dict(last_step_outputs))
    ctx._last_step_outputs_reduce_ops = dict(reduce_ops)
    ctx._non_tensor_outputs = dict(non_tensor_outputs)
    return ctx


def last_step_reduce_ops(ctx):
    return ctx._last_step_outputs_reduce_ops


def make_dataset_iterator(extended, dataset):
    return extended._make_dataset_iterator(dataset)


def make_input_fn_iterator(extended, input_fn, replication_mode):
    return extended._make_input_fn_iterator(input_fn, replication_mode=replication_mode)


def configure(extended, session_config, cluster_spec, task_type, task_id):
    return extended._configure(session_config, cluster_spec, task_type, task_id)


def container_strategy(extended):
    return extended._container_strategy()


def autograph_source_map():
    """This thread's map of AutoGraph-generated (file, line) to (file, line, function)."""
    import threading

    stack = __getattr__("source_mapper_stacks").get(threading.get_ident())
    return stack[-1].get_effective_source_map() if stack else {}


def tf1_run_steps_on_iterator(extended, fn, iterator, iterations, initial_loop_values):
    """TF's own TF1 graph-mode multi-step loop of `extended`."""
    return extended._experimental_run_steps_on_iterator(
        fn, iterator, iterations, initial_loop_values
    )


def all_reduces_with_collectives(extended):
    """Whether MirroredExtended `extended` all-reduces float32 values with collective ops."""
    import types

    import tensorflow as tf

    # A stand-in value: asking with a tensor would add an op to a TF1 graph.
    ops = extended._get_cross_device_ops(types.SimpleNamespace(dtype=tf.float32))
    return isinstance(ops, __getattr__("CollectiveAllReduce"))



def collective_keys(extended):
    """MirroredExtended `extended`'s collective key allocator (group and instance keys)."""
    return extended._collective_keys


def capture_collective_keys(closure):
    """The key allocator of the collective whose instance key `closure` gives at call
    time (a launcher's bound `_next_instance_key`); None for any other capture."""
    launcher = getattr(closure, "__self__", None)
    if isinstance(launcher, __getattr__("CollectiveReplicaLauncher")):
        return launcher._collective_keys
    return None
