"""Argument checks shared by the shims.

Each raises before TensorFlow state changes, naming the argument, the value,
what is accepted and what to do.
"""

import functools
import numbers

# TF1's on-device loops counted steps in an int32 (tpu.training_loop.repeat): no
# V1 program ran more steps a call, and past int64 TensorFlow fails deep inside.
MAX_STEPS = 2**31 - 1


def show(value):
    """A value as error messages show it: its repr and its type."""
    return f"{value!r} ({type(value).__name__})"


def positive_int(name, value, *, default=None, hint=""):
    """Returns `value` (or `default` for None) as an int >= 1."""
    if value is None and default is not None:
        return default
    # bool is an int subclass, and numpy integers are not ints: check both ways.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive int; got {show(value)}.{hint}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int (>= 1); got {show(value)}.{hint}")
    return int(value)


def step_count(name, value, *, default, hint):
    """A count of steps per call: an int from 1 to MAX_STEPS."""
    steps = positive_int(name, value, default=default, hint=hint)
    if steps > MAX_STEPS:
        raise ValueError(
            f"{name} must be at most {MAX_STEPS} (TF1 counted the steps of an "
            f"on-device loop in an int32); got {steps}.{hint}"
        )
    return steps


def steps_per_run(value):
    return step_count(
        "steps_per_run",
        value,
        default=1,
        hint=" Pass None or 1 to run one step per call, or N > 1 to run N steps "
        "on the device per call.",
    )


def communication(value):
    """Returns the `CommunicationImplementation` member that `value` names."""
    from compat_distribute import _tf

    enum = _tf.CommunicationImplementation
    if isinstance(value, enum):
        return value
    accepted = ", ".join(f"CollectiveCommunication.{m.name}" for m in enum)
    if isinstance(value, _tf.CommunicationOptions):
        raise TypeError(
            f"communication must be a CollectiveCommunication member; got a "
            f"CommunicationOptions object. Pass communication="
            f"CollectiveCommunication.<NAME> (one of {accepted}), or build "
            f"tf.distribute.MultiWorkerMirroredStrategy(communication_options=...) "
            f"directly for TF2 options."
        )
    if isinstance(value, str) and value.upper() in enum.__members__:
        raise TypeError(
            f"communication must be a CollectiveCommunication member; got the "
            f"string {value!r}. Pass communication=CollectiveCommunication."
            f"{value.upper()} instead."
        )
    raise ValueError(
        f"communication must be one of {accepted}; got {show(value)}. "
        f"Import it as compat_distribute.CollectiveCommunication."
    )


def device_assignment(value):
    if value is None:
        return None
    import tensorflow as tf

    if not isinstance(value, tf.tpu.experimental.DeviceAssignment):
        raise TypeError(
            f"device_assignment must be None or a "
            f"tf.tpu.experimental.DeviceAssignment; got {show(value)}. Build one "
            f"with tf.tpu.experimental.DeviceAssignment.build(topology, "
            f"computation_shape=..., num_replicas=...), where topology is what "
            f"tf.tpu.experimental.initialize_tpu_system(resolver) returned."
        )
    return value


def cluster_resolver(name, value, *, tpu, is_tpu):
    """Checks that `value` is a resolver of the kind the strategy needs.

    A TPU strategy (`tpu=True`) takes a TPU resolver; a multi-worker strategy
    takes any other resolver. `is_tpu` says which `value` is
    (`tpu.is_tpu_resolver`, which knows the resolvers that name a backend).
    """
    if value is None:
        return None
    import tensorflow as tf

    resolvers = tf.distribute.cluster_resolver
    if tpu:
        fix = (
            "tf.distribute.cluster_resolver.TPUClusterResolver(tpu=...) for a real TPU, or "
            "compat_distribute.testing.FakeTPUClusterResolver() to run on virtual CPU devices."
        )
    else:
        fix = (
            "None or tf.distribute.cluster_resolver.TFConfigClusterResolver() to read "
            "TF_CONFIG, or a SimpleClusterResolver of a tf.train.ClusterSpec."
        )
    if not isinstance(value, resolvers.ClusterResolver):
        raise TypeError(
            f"{name} must be None or a "
            f"tf.distribute.cluster_resolver.ClusterResolver; got {show(value)}. Pass {fix}"
        )
    if tpu and not is_tpu:
        raise TypeError(f"{name} must be a TPU resolver; got a {type(value).__name__}. Pass {fix}")
    if not tpu and is_tpu:
        raise TypeError(
            f"{name} must describe a multi-worker cluster (e.g. "
            f"tf.distribute.cluster_resolver.TFConfigClusterResolver); got the TPU "
            f"resolver {type(value).__name__}. Use compat_distribute.TPUStrategy "
            f"for TPUs."
        )
    return value


def strategy(value, *, hint):
    """Checks that `value` is a `tf.distribute.Strategy` (TF2's or TF1's)."""
    import tensorflow as tf

    if not isinstance(value, (tf.distribute.Strategy, tf.compat.v1.distribute.Strategy)):
        raise TypeError(
            f"strategy must be a tf.distribute.Strategy (for example "
            f"compat_distribute.TPUStrategy(...), or tf.distribute.get_strategy() "
            f"outside any strategy's scope); got {show(value)}. {hint}"
        )
    return value


def function(name, value, *, hint=""):
    """Checks that `value` (a step or input function) is callable."""
    if not callable(value):
        raise TypeError(f"{name} must be callable; got {show(value)}.{hint}")
    return value


def dataset(name, value):
    """Checks that `value` is a `tf.data.Dataset` (what the V1 iterators took)."""
    import tensorflow as tf

    if not isinstance(value, tf.data.Dataset):
        raise TypeError(
            f"{name} must be a tf.data.Dataset; got {show(value)}. Build one with "
            f"tf.data.Dataset.from_tensor_slices(...).batch(global_batch_size)."
        )
    return value


def numpy_input(value):
    """Checks `numpy_input` of `experimental_make_numpy_dataset`: NumPy arrays (a nest of
    them, as TF1 took) that share their first dimension, the examples."""
    import numpy as np
    import tensorflow as tf

    leaves = tf.nest.flatten(value)  # In tf.nest's order: dicts by sorted key.
    accepted = (
        "numpy_input must be a NumPy array or a nest (tuple, list, dict) of NumPy arrays "
        "of one first dimension (the examples)"
    )
    if not leaves:
        raise ValueError(f"{accepted}; got {show(value)}, which holds no array.")
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, np.ndarray) or leaf.ndim == 0:
            where = f" (item {i} of tf.nest.flatten(numpy_input))" if len(leaves) > 1 else ""
            raise TypeError(
                f"{accepted}; got {show(leaf)}{where}. Pass np.asarray(...) of at least one "
                f"dimension, or build the dataset with tf.data.Dataset.from_tensor_slices(...)."
            )
    lengths = [leaf.shape[0] for leaf in leaves]
    if len(set(lengths)) > 1:
        raise ValueError(
            f"{accepted}; the arrays of tf.nest.flatten(numpy_input) have {lengths} examples. "
            f"Give every array the same first dimension."
        )
    return value


def step_iterator(name, value, *, method):
    """Checks that `value` is an iterator a step loop can draw batches from.

    `method` is what the loop calls: "__next__" (TF2's `next(iterator)`) or
    "get_next" (TF1's `iterator.get_next()`).
    """
    if not callable(getattr(value, method, None)):
        import tensorflow as tf

        fix = (
            "iter(strategy.experimental_distribute_dataset(dataset))"
            if method == "__next__"
            else "strategy.make_dataset_iterator(dataset)"
        )
        told = ""
        if isinstance(value, tf.data.Dataset):
            told = " (a dataset, not an iterator over it)"
        raise TypeError(
            f"{name} must be an iterator with {method}(); got {show(value)}{told}. "
            f"Pass {fix}."
        )
    return value


def session_config(value):
    """Checks `configure`'s `session_config`: None or a `tf.compat.v1.ConfigProto`."""
    if value is None:
        return None
    import tensorflow as tf

    if not isinstance(value, tf.compat.v1.ConfigProto):
        raise TypeError(
            f"session_config must be None or a tf.compat.v1.ConfigProto; got "
            f"{show(value)}. Pass the ConfigProto your Session is built with; "
            f"configure() updates it in place."
        )
    return value


def reduce_op(value):
    """Checks a `reduce_op`: a `tf.distribute.ReduceOp` or its name.

    TensorFlow raises a bare ValueError ("'SUMM' is not a valid ReduceOp") for
    a wrong name and an AssertionError with no text for anything else; the
    types are kept, with a text that says what to pass.
    """
    import tensorflow as tf

    if isinstance(value, tf.distribute.ReduceOp):
        return value
    accepted = "reduce_op must be tf.distribute.ReduceOp.SUM or MEAN (or 'SUM' / 'MEAN')"
    if isinstance(value, str):
        try:
            return tf.distribute.ReduceOp(value.upper())
        except ValueError:
            raise ValueError(f"{accepted}; got {value!r}.") from None
    raise AssertionError(
        f"{accepted}; got {value!r}. TensorFlow's reduce_to asserts the same (with no "
        f"message)."
    )


def leading(error):
    """`error`, marked so that a traced step re-raises it with its own text first.

    Inside a `tf.function`, AutoGraph rewrites an error to start with "in user
    code:" and the frames, its cause last; it leaves alone an error that has
    `ag_pass_through` (autograph/impl/api.py), as TensorFlow's own staging
    errors do. `tests/shims/test_members.py` pins it.
    """
    error.ag_pass_through = True
    return error


def errors_lead(method):
    """`method`, its ValueErrors and TypeErrors raised `leading` (see there)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (ValueError, TypeError) as e:
            raise leading(e)

    return wrapper
