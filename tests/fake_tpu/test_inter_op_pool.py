"""The devices the project creates get an inter-op thread pool they cannot exhaust.

TensorFlow sizes its inter-op pool to the machine's cores; a distributed iterator
holds a thread of it per device while it waits for input. On 2 cores a fake v3-8
(8 devices) blocked forever within a few calls of a step that iterates a
distributed dataset inside a `tf.function`. `set_virtual_devices` (which the
fake TPU, the pytest plugin and cluster tasks call) sizes the pool, and keeps a
size the user chose, warning when it is too small.
"""

import os
import subprocess
import textwrap

import pytest
import tensorflow as tf

from compat_distribute.testing import devices

# A process on at most 2 CPUs (TensorFlow sizes its default pool to them when its
# runtime starts), calling 20 times a step that iterates a fake v3-8's distributed
# dataset. With the pool TensorFlow would give (2 threads) the first call blocks; with
# 4 the third (measured); 20 calls cost a third of the 60 this once made.
ITERATE_ON_TWO_CORES = """
    import os
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    {before}
    import tensorflow as tf
    from compat_distribute.testing import fake_tpu

    with fake_tpu("v3-8"):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)

        @tf.function
        def two_steps(dataset):
            iterator = iter(dataset)
            return [
                strategy.experimental_local_results(strategy.run(tf.square, args=(next(iterator),)))
                for _ in range(2)
            ]

        for _ in range(20):
            numbers = tf.data.Dataset.range(32).map(lambda x: tf.cast(x, tf.float32))
            outputs = two_steps(strategy.experimental_distribute_dataset(numbers.batch(16)))
        print(tf.config.threading.get_inter_op_parallelism_threads())
        print([t.numpy().tolist() for t in outputs[1]])
"""


def _iterate_on_two_cores(run_python, before=""):
    code = ITERATE_ON_TWO_CORES.format(before=before)
    try:
        # Forked from the warm interpreter: TensorFlow imported, its runtime not started.
        return run_python(textwrap.dedent(code), timeout=150)
    except subprocess.TimeoutExpired:
        pytest.fail("a step iterating a distributed dataset blocked (inter-op pool exhausted)")


def test_a_fake_v3_8_on_two_cores_iterates_without_blocking(run_python):
    result = _iterate_on_two_cores(run_python)
    assert result.returncode == 0, result.stderr
    pool, second_step = result.stdout.split("\n")[:2]
    cores = min(2, len(os.sched_getaffinity(0)))
    assert int(pool) == 8 + cores  # a thread per device on top of the cores
    # The second batch is 16..31: two numbers a replica, squared.
    assert second_step == str([[float(x * x) for x in (16 + 2 * r, 17 + 2 * r)] for r in range(8)])
    assert "inter-op thread pool" not in result.stderr


def test_a_pool_the_user_set_too_small_is_kept_with_a_warning_naming_the_fix(run_python):
    result = run_python(
        """
        import warnings
        import tensorflow as tf
        from compat_distribute.testing import set_virtual_devices
        tf.config.threading.set_inter_op_parallelism_threads(3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            set_virtual_devices(8)
        print(tf.config.threading.get_inter_op_parallelism_threads())
        print(caught[0].category.__name__, caught[0].message)
        """
    )
    assert result.returncode == 0, result.stderr
    pool, warning = result.stdout.strip().split("\n")
    assert pool == "3"  # the user's choice stands
    assert warning == (
        "RuntimeWarning TensorFlow's inter-op thread pool has 3 thread(s) (set with "
        "set_inter_op_parallelism_threads) for 8 logical devices: a distributed iterator holds "
        "a thread per device while it waits for input, so a step can block forever with fewer "
        "than 9. Set tf.config.threading.set_inter_op_parallelism_threads(9) or more (or unset "
        "it, and TF_NUM_INTEROP_THREADS, to let set_virtual_devices size the pool) before "
        "TensorFlow starts."
    )


def test_a_pool_size_from_the_environment_is_kept_and_checked(run_python):
    result = run_python(
        """
        import warnings
        import tensorflow as tf
        from compat_distribute.testing import set_virtual_devices
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            set_virtual_devices(4)
            set_virtual_devices(2)
        print(tf.config.threading.get_inter_op_parallelism_threads())
        print(len(caught), str(caught[0].message).split(" for ")[0])
        """,
        env={"TF_NUM_INTEROP_THREADS": "2"},  # a TF_ variable: run_python runs it fresh
    )
    assert result.returncode == 0, result.stderr
    # Nothing set over the variable; 4 devices warned of (2 < 5), 4 devices again
    # at the second call (the configuration keeps 4).
    assert result.stdout.strip().split("\n") == [
        "0",
        "2 TensorFlow's inter-op thread pool has 2 thread(s) ($TF_NUM_INTEROP_THREADS)",
    ]


def test_a_large_enough_user_pool_is_kept_silently_and_ours_grows_with_the_devices(run_python):
    result = run_python(
        """
        import os, warnings
        warnings.simplefilter("error")
        import tensorflow as tf
        from compat_distribute.testing import set_virtual_devices
        from compat_distribute.testing.devices import inter_op_threads
        set_virtual_devices(2)
        print(tf.config.threading.get_inter_op_parallelism_threads() == inter_op_threads(2))
        set_virtual_devices(6)
        print(tf.config.threading.get_inter_op_parallelism_threads() == inter_op_threads(6))
        tf.config.threading.set_inter_op_parallelism_threads(40)
        set_virtual_devices(8)
        print(tf.config.threading.get_inter_op_parallelism_threads())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "40"]


def test_devices_made_before_tensorflow_started_elsewhere_are_checked(run_python):
    result = run_python(
        """
        import os, warnings
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
        import tensorflow as tf
        from compat_distribute.testing import set_virtual_devices
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
        tf.constant(1)  # TensorFlow starts with 4 devices and its default pool
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            print(len(set_virtual_devices(4)))
        print(tf.config.threading.get_inter_op_parallelism_threads())
        print(str(caught[0].message).split(" for ")[0])
        """
    )
    assert result.returncode == 0, result.stderr
    cores = min(2, len(os.sched_getaffinity(0)))
    assert result.stdout.strip().split("\n") == [
        "4",
        "0",
        f"TensorFlow's inter-op thread pool has {cores} thread(s) (TensorFlow's default: the "
        f"machine's cores)",
    ]


def test_a_pod_host_server_gets_the_same_pool_unless_the_environment_chose(monkeypatch):
    monkeypatch.delenv(devices.INTER_OP_ENV, raising=False)
    assert devices.config_inter_op_threads(8) == devices.inter_op_threads(8) == 8 + len(os.sched_getaffinity(0))
    assert devices.config_inter_op_threads(1) == 0  # one device: TensorFlow's own size
    monkeypatch.setenv(devices.INTER_OP_ENV, "3")
    assert devices.config_inter_op_threads(8) == 0  # the server reads the variable itself


def test_this_session_pool_was_sized_with_its_devices():
    # The plugin created the session's devices before TensorFlow started.
    cpus = len(tf.config.list_logical_devices("CPU"))
    assert cpus >= 8
    assert tf.config.threading.get_inter_op_parallelism_threads() == devices.inter_op_threads(cpus)
