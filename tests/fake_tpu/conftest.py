"""Shared fake TPU strategies for the tests of the fake TPU (built once per module)."""

import gc

import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import FakeTPUStrategy
from compat_distribute.testing import initialize_tpu_system
from compat_distribute.testing._fake_tpu import replicate


@pytest.fixture(autouse=True, scope="module")
def free_iterators_before_exit():
    """Torn down last: frees the module's strategies and the iterators their step
    loops capture while TensorFlow still runs. Left to the interpreter's exit,
    each iterator's destructor waits for its tf.data autotune thread (a minute
    or more)."""
    yield
    gc.collect()


@pytest.fixture(name="v3_8", scope="module")
def v3_8_fixture():
    return FakeTPUStrategy(FakeTPUClusterResolver("v3-8"))


def v3_8_tracing(mode):
    """A fake v3-8 strategy that traces its steps in `mode` (see replicate.py)."""
    strategy = FakeTPUStrategy(FakeTPUClusterResolver("v3-8"))
    replicate.set_trace_mode(strategy, mode)
    return strategy


@pytest.fixture(name="new_v3_8", scope="session")
def new_v3_8_fixture():
    """`v3_8_tracing`, for a test that needs a strategy of its own."""
    return v3_8_tracing


@pytest.fixture(name="once", scope="module")
def once_fixture():
    """A v3-8 tracing each step once, whatever $COMPAT_DISTRIBUTE_FAKE_TPU_TRACE says."""
    return v3_8_tracing(replicate.ONCE)


@pytest.fixture(name="per_replica", scope="module")
def per_replica_fixture():
    """A v3-8 tracing each step once per replica, as MirroredStrategy does."""
    return v3_8_tracing(replicate.PER_REPLICA)


@pytest.fixture(name="v4_8", scope="module")
def v4_8_fixture():
    return FakeTPUStrategy(FakeTPUClusterResolver("v4-8"))


@pytest.fixture(name="model_parallel", scope="module")
def model_parallel_fixture():
    """4 replicas x 2 logical cores on a v3-8."""
    resolver = FakeTPUClusterResolver("v3-8")
    assignment = tf.tpu.experimental.DeviceAssignment.build(
        initialize_tpu_system(resolver), computation_shape=[1, 1, 1, 2], num_replicas=4
    )
    return FakeTPUStrategy(resolver, experimental_device_assignment=assignment)


@pytest.fixture(name="spmd", scope="module")
def spmd_fixture():
    """1 replica x 8 logical cores, SPMD partitioning."""
    resolver = FakeTPUClusterResolver(mesh_shape=[1, 2, 2, 2])
    assignment = tf.tpu.experimental.DeviceAssignment.build(
        initialize_tpu_system(resolver), computation_shape=[1, 2, 2, 2], num_replicas=1
    )
    return FakeTPUStrategy(
        resolver, experimental_device_assignment=assignment, experimental_spmd_xla_partitioning=True
    )


@pytest.fixture(name="v1_steps", scope="module")
def v1_steps_fixture():
    return compat_distribute.TPUStrategy(FakeTPUClusterResolver("v3-8"), steps_per_run=4)


# The resolver.
