"""The one place that creates virtual (logical) devices, and the one limit on how many.

TensorFlow fixes its devices when the runtime starts, so they are set before it.
The devices share TensorFlow's inter-op pool, sized to the cores; a distributed
iterator holds one of its threads per device, so the pool is sized with the
devices (`inter_op_threads`), or a 2-core machine's steps block forever.
"""

import os
import warnings

from compat_distribute import _validate

DEVICE_TYPES = ("CPU", "GPU")
DEFAULT_GPU_MEMORY_MB = 1024
# The most logical devices one process gets. 256 CPU devices start in a tenth of
# a second, and a step over all of them takes about 2 s on 2 cores; a one-host
# TPU slice has at most 8 cores. A count far past it is a typo that would
# otherwise build a device list until memory runs out.
MAX_DEVICES = 256
_WHERE_LIMIT = "compat_distribute.testing.devices.MAX_DEVICES"


def check_count(name, n, *, fix=""):
    """Returns `n` as an int in [1, MAX_DEVICES]; raises naming `name` otherwise.

    `fix` says what to pass instead; it defaults to asking for what tests need.
    """
    fix = fix or (
        " Ask for as many devices as the tests need: a fake TPU's core count, or the "
        "n of the largest multi_device(n)."
    )
    n = _validate.positive_int(name, n, hint=fix)
    if n > MAX_DEVICES:
        raise ValueError(
            f"{name} must be at most {MAX_DEVICES} ({_WHERE_LIMIT}, the most virtual "
            f"devices one process gets); got {n}.{fix}"
        )
    return n


# The variable TensorFlow reads for its inter-op pool's size when no config sets it.
INTER_OP_ENV = "TF_NUM_INTEROP_THREADS"
# The pool size set_virtual_devices chose, or None: a size it set is its own to grow.
_pool_we_set = None


def _machine_cores():
    """The cores TensorFlow sizes its pools to (the CPUs this process may run on)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def inter_op_threads(device_count):
    """The inter-op pool set_virtual_devices gives `device_count` logical devices:
    a thread per device on top of the machine's cores (TensorFlow's own default)."""
    return device_count + _machine_cores()


def config_inter_op_threads(device_count):
    """`inter_op_parallelism_threads` for the `ConfigProto` of a server holding
    `device_count` devices: `inter_op_threads`, or 0 (TensorFlow reads its
    variable) where TF_NUM_INTEROP_THREADS chose the size."""
    if device_count < 2 or _pool_size_from_environment():
        return 0
    return inter_op_threads(device_count)


def size_clients_inter_op_pools(device_count):
    """Sizes the inter-op pool of the eager contexts that clients open on this
    server process of `device_count` devices (a pod's host).

    Such a context takes its pool from the client's config, which names no size
    unless the client chose one; TensorFlow then reads $TF_NUM_INTEROP_THREADS.
    Left to the machine's cores, an iterator made in a step and left before its
    end blocks the host's pool (each core's reader is destroyed on a pool thread
    that waits for another). Does nothing where the variable is set already.
    """
    if device_count >= 2 and not _pool_size_from_environment():
        os.environ[INTER_OP_ENV] = str(inter_op_threads(device_count))


def fewest_inter_op_threads(device_count):
    """Below this, distributed input over `device_count` devices can block forever."""
    return device_count + 1


def _pool_too_small(size, source, device_count):
    fewest = fewest_inter_op_threads(device_count)
    return RuntimeWarning(
        f"TensorFlow's inter-op thread pool has {size} thread(s) ({source}) for "
        f"{device_count} logical devices: a distributed iterator holds a thread per device "
        f"while it waits for input, so a step can block forever with fewer than {fewest}. "
        f"Set tf.config.threading.set_inter_op_parallelism_threads({fewest}) or more "
        f"(or unset it, and {INTER_OP_ENV}, to let set_virtual_devices size the pool) "
        f"before TensorFlow starts."
    )


def _pool_size_from_environment():
    """TF_NUM_INTEROP_THREADS as TensorFlow reads it: a positive int, else unset (0)."""
    try:
        return max(int(os.environ.get(INTER_OP_ENV, "")), 0)
    except ValueError:
        return 0


def _set_pool(tf, size):
    """Sets the pool's size; False when the runtime has started (a configuration
    that asks for the devices it started with gets this far)."""
    global _pool_we_set
    try:
        tf.config.threading.set_inter_op_parallelism_threads(size)
    except RuntimeError:
        return False
    _pool_we_set = size
    return True


def _size_inter_op_pool(tf, device_count, started):
    """Gives the pool `inter_op_threads(device_count)` threads, unless the user chose a
    size (kept, with a warning when too small) or the runtime started (checked only)."""
    if device_count < 2:
        return  # One device shares the pool with nothing.
    configured = tf.config.threading.get_inter_op_parallelism_threads()
    from_environment = _pool_size_from_environment()
    if configured and configured != _pool_we_set:
        size, source = configured, "set with set_inter_op_parallelism_threads"
    elif not configured and from_environment:
        size, source = from_environment, f"${INTER_OP_ENV}"
    elif not started and _set_pool(tf, inter_op_threads(device_count)):
        return
    elif configured:
        size, source = configured, "sized by set_virtual_devices before TensorFlow started"
    else:
        size, source = _machine_cores(), "TensorFlow's default: the machine's cores"
    if size < fewest_inter_op_threads(device_count):
        warnings.warn(_pool_too_small(size, source, device_count), stacklevel=3)


def _too_late(n, device_type, existing):
    return RuntimeError(
        f"set_virtual_devices({n}, {device_type!r}) came too late: TensorFlow's runtime "
        f"is already initialised with {existing} logical {device_type} device(s), and "
        f"logical devices cannot be changed once it has started. Call "
        f"set_virtual_devices before any TensorFlow op, device listing or strategy: at "
        f"the top of your program, or in conftest.py's pytest_configure (the "
        f"compat_distribute pytest plugin does this for you with --tf-devices={n}). "
        f"fake_tpu() and FakeTPUClusterResolver call it for their cores: enter or build "
        f"them before other TensorFlow code."
    )


def set_virtual_devices(n, device_type="CPU", *, memory_limit_mb=None):
    """Splits the first physical `device_type` device into `n` logical devices.

    Returns the names of the first `n` logical devices. A configuration that
    already has more devices is kept, so calls for different counts compose.
    Called after the runtime started, it succeeds if at least `n` logical
    devices already exist and raises `RuntimeError` otherwise. For "GPU",
    each logical device gets `memory_limit_mb` of memory (default
    `DEFAULT_GPU_MEMORY_MB`); for "CPU" it is refused, as TensorFlow refuses
    a memory limit on CPU devices. `n` is at most `MAX_DEVICES`.
    """
    n = check_count("n", n)
    if device_type not in DEVICE_TYPES:
        raise ValueError(
            f"device_type must be one of {DEVICE_TYPES}; got {device_type!r}. TPU cores "
            f"are faked with compat_distribute.testing.FakeTPUClusterResolver."
        )
    if device_type == "CPU" and memory_limit_mb is not None:
        raise ValueError(
            f"memory_limit_mb applies to GPU devices only: TensorFlow does not support a "
            f"memory limit on CPU devices; got memory_limit_mb={memory_limit_mb!r} with "
            f"device_type='CPU'. Drop memory_limit_mb, or pass device_type='GPU'."
        )
    if memory_limit_mb is None:
        memory_limit_mb = DEFAULT_GPU_MEMORY_MB
    memory_limit_mb = _validate.positive_int(
        "memory_limit_mb",
        memory_limit_mb,
        hint=f" Pass each logical GPU's memory in MB, e.g. {DEFAULT_GPU_MEMORY_MB} (the default).",
    )
    import tensorflow as tf

    physical = tf.config.list_physical_devices(device_type)  # does not start the runtime
    if not physical:
        raise RuntimeError(
            f"set_virtual_devices({n}, {device_type!r}): this machine has no physical "
            f"{device_type} device visible to TensorFlow. Use device_type='CPU'."
        )
    current = tf.config.get_logical_device_configuration(physical[0]) or []
    count = max(n, len(current))
    if device_type == "CPU":
        config = [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
    else:
        config = [
            tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit_mb) for _ in range(count)
        ]
    try:
        tf.config.set_logical_device_configuration(physical[0], config)
    except RuntimeError:
        # Started already: use what exists, if it is enough.
        existing = tf.config.list_logical_devices(device_type)
        if len(existing) < n:
            raise _too_late(n, device_type, len(existing)) from None
        _size_inter_op_pool(tf, len(existing), started=True)
        return [d.name for d in existing[:n]]
    _size_inter_op_pool(tf, count, started=False)
    # Not started yet: the names are known without starting it.
    return [f"/job:localhost/replica:0/task:0/device:{device_type}:{i}" for i in range(n)]
