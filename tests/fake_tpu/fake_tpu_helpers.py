"""Helpers of the fake TPU's tests."""

import numpy as np

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"

# TensorFlow's texts, copied from tensorflow/python/distribute/tpu_strategy.py.
EAGER_RUN_ERROR = (
    "TPUStrategy.run(fn, ...) does not support pure eager "
    "execution. please make sure the function passed into "
    "`strategy.run` is a `tf.function` or "
    "`strategy.run` is called inside a `tf.function` if "
    "eager behavior is enabled."
)
SPMD_ASSIGN_ERROR = (
    "Cannot assign a tensor to a logical device in SPMD mode. To disable "
    "SPMD, Please construct the TPUStrategy with "
    "`experimental_spmd_xla_partitioning=False`"
)


def values(per_replica, strategy):
    return [np.asarray(t).tolist() for t in strategy.experimental_local_results(per_replica)]

