"""XLA's kernel table: which ops, with which dtypes, XLA can compile (internal).

Only the CPU JIT's table is readable without a TPU.
"""

from __future__ import annotations

import functools
import threading

import tensorflow as tf

from compat_distribute.testing import _tf

__all__ = ["XLA_DEVICE", "accepts", "has_kernel", "table"]

XLA_DEVICE = "XLA_CPU_JIT"

_table_lock = threading.Lock()


@functools.cache
def table() -> dict:
    """op type -> its XLA_CPU_JIT KernelDefs; fills TF's table on first use."""
    with _table_lock:
        tf.function(lambda x: x + 1, jit_compile=True).experimental_get_compiler_ir(
            tf.TensorSpec([], tf.float32)
        )(stage="hlo")
        kernels: dict = {}
        for kernel in _tf.get_all_registered_kernels().kernel:
            if kernel.device_type == XLA_DEVICE:
                kernels.setdefault(kernel.op, []).append(kernel)
        return kernels


def has_kernel(op_type: str) -> bool:
    """XLA has a kernel for `op_type`, for some dtypes."""
    return op_type in table()


def _kernel_accepts(kernel, attrs) -> bool:
    for constraint in kernel.constraint:
        allowed = set(constraint.allowed_values.list.type)
        value = attrs.get(constraint.name)
        if value is None:
            continue
        if value.HasField("list"):
            types = list(value.list.type)
        elif value.HasField("type"):
            types = [value.type]
        else:
            continue
        if any(t not in allowed for t in types):
            return False
    return True


def accepts(op_type: str, attrs) -> bool:
    """One of XLA's `op_type` kernels accepts these attrs (an op's `node_def.attr`)."""
    return any(_kernel_accepts(k, attrs) for k in table().get(op_type, ()))
