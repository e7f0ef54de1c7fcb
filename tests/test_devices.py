"""set_virtual_devices: before the runtime starts it configures, after it checks."""

import time

import pytest
import tensorflow as tf

from compat_distribute.testing import FakeTPU
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import set_virtual_devices
from compat_distribute.testing.devices import MAX_DEVICES
from support.load import bound


def test_after_start_it_returns_existing_devices_when_enough():
    tf.constant(1)  # the session's runtime is running with 8 CPUs
    names = set_virtual_devices(4)
    assert names == [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(4)]


def test_after_start_asking_for_more_says_to_call_it_earlier():
    tf.constant(1)
    with pytest.raises(RuntimeError) as info:
        set_virtual_devices(16)
    message = str(info.value)
    assert message.startswith("set_virtual_devices(16, 'CPU') came too late: TensorFlow's runtime")
    assert "already initialised with 8 logical CPU device(s)" in message
    assert "Call set_virtual_devices before any TensorFlow op" in message
    assert "pytest_configure" in message


@pytest.mark.parametrize(
    "args, error, text",
    [
        ((0,), ValueError, "n must be a positive int (>= 1); got 0 (int)"),
        (("8",), TypeError, "n must be a positive int; got '8' (str)"),
        ((2, "TPU"), ValueError, "device_type must be one of ('CPU', 'GPU'); got 'TPU'"),
    ],
)
def test_bad_arguments(args, error, text):
    with pytest.raises(error) as info:
        set_virtual_devices(*args)
    assert text in str(info.value)


@pytest.mark.parametrize(
    "memory_limit_mb, error, got",
    [(-5, ValueError, "positive int (>= 1); got -5 (int)"), ("1024", TypeError, "positive int; got '1024' (str)")],
)
def test_a_memory_limit_that_is_not_a_positive_int_is_refused(memory_limit_mb, error, got):
    with pytest.raises(error) as info:
        set_virtual_devices(2, "GPU", memory_limit_mb=memory_limit_mb)
    assert str(info.value) == (
        f"memory_limit_mb must be a {got}. Pass each logical GPU's memory in MB, e.g. 1024 "
        f"(the default)."
    )


def test_a_memory_limit_on_cpu_is_refused_naming_the_fix():
    with pytest.raises(ValueError) as info:
        set_virtual_devices(2, "CPU", memory_limit_mb=512)
    assert str(info.value) == (
        "memory_limit_mb applies to GPU devices only: TensorFlow does not support a memory "
        "limit on CPU devices; got memory_limit_mb=512 with device_type='CPU'. Drop "
        "memory_limit_mb, or pass device_type='GPU'."
    )


def test_tensorflow_itself_refuses_a_cpu_memory_limit(run_python):
    # Why the limit is refused rather than passed on: TF's runtime rejects it.
    result = run_python("""
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        limited = tf.config.LogicalDeviceConfiguration(memory_limit=512)
        try:
            tf.config.set_logical_device_configuration(cpu, [limited, limited])
        except ValueError as error:
            print(error)
        """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == (
        "Setting memory limit on CPU virtual devices is currently not supported"
    )


LIMIT_TEXT = (
    f"must be at most {MAX_DEVICES} (compat_distribute.testing.devices.MAX_DEVICES, the most "
    f"virtual devices one process gets); got {{n}}. Ask for as many devices as the tests "
    f"need: a fake TPU's core count, or the n of the largest multi_device(n)."
)


@pytest.mark.parametrize("n", [MAX_DEVICES + 1, 100_000_000])
def test_a_count_past_the_limit_is_refused_at_once(n):
    start = time.monotonic()
    with pytest.raises(ValueError) as info:
        set_virtual_devices(n)
    assert time.monotonic() - start < bound(1)  # refused, not built: 10**8 devices would fill memory
    assert str(info.value) == "n " + LIMIT_TEXT.format(n=n)


def test_the_limit_itself_is_accepted():
    # The runtime is running with 8 CPUs: the limit passes the check, then is too late.
    too_late = rf"set_virtual_devices\({MAX_DEVICES}, 'CPU'\) came too late"
    with pytest.raises(RuntimeError, match=too_late):
        set_virtual_devices(MAX_DEVICES)


@pytest.mark.parametrize("make", [FakeTPU, FakeTPUClusterResolver], ids=["FakeTPU", "resolver"])
def test_a_fake_mesh_past_the_limit_is_refused_by_the_same_check(make):
    mesh = (16, 16, 1, 2)
    with pytest.raises(ValueError) as info:
        make(mesh_shape=mesh)
    assert str(info.value) == (
        f"mesh_shape {mesh}'s core count "
        + LIMIT_TEXT.format(n=512).partition(" Ask for")[0]
        + " Use a smaller mesh."
    )
    huge = (10**6, 10**6, 10**6, 2)  # 2 * 10**18 cores: refused as a count, building nothing
    too_many = rf"core count must be at most {MAX_DEVICES} .*; got {2 * 10**18}\."
    with pytest.raises(ValueError, match=too_many):
        make(mesh_shape=huge)


def test_gpu_without_a_gpu_is_a_clear_error():
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU; the no-GPU error cannot occur")
    with pytest.raises(RuntimeError, match="this machine has no physical GPU device visible"):
        set_virtual_devices(2, "GPU")


def test_before_start_it_configures_and_compose(run_python):
    result = run_python("""
        from compat_distribute.testing import set_virtual_devices
        print(set_virtual_devices(2)[-1])
        print(len(set_virtual_devices(6)))
        print(len(set_virtual_devices(3)))  # never shrinks what was asked before
        import tensorflow as tf
        print(len(tf.config.list_logical_devices("CPU")))
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["/job:localhost/replica:0/task:0/device:CPU:1", "6", "3", "6"]
