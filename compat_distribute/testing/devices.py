"""The one place that creates virtual (logical) devices, and the one limit on how many.

TensorFlow fixes its devices when the runtime starts, so they are set before it.
"""

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


def _too_late(n, device_type, existing):
    return RuntimeError(
        f"set_virtual_devices({n}, {device_type!r}) came too late: TensorFlow's runtime "
        f"is already initialised with {existing} logical {device_type} device(s), and "
        f"logical devices cannot be changed once it has started. Call "
        f"set_virtual_devices before any TensorFlow op, device listing or strategy: at "
        f"the top of your program, or in conftest.py's pytest_configure (the "
        f"compat_distribute pytest plugin does this for you with --tf-devices={n})."
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
        return [d.name for d in existing[:n]]
    # Not started yet: the names are known without starting it.
    return [f"/job:localhost/replica:0/task:0/device:{device_type}:{i}" for i in range(n)]
