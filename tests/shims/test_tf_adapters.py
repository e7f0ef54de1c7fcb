"""The adapters to TensorFlow internals: every entry exists in the installed TensorFlow,
and nothing else in the package imports `tensorflow.python`."""

import ast
import importlib
import pathlib

import pytest

from compat_distribute import _lazy

ADAPTERS = ("compat_distribute._tf", "compat_distribute.testing._tf")
PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "compat_distribute"


def _entries(kind):
    for name in ADAPTERS:
        module = importlib.import_module(name)
        if kind == "internals":
            yield from ((name, key, target) for key, target in module.INTERNALS.items())
        else:
            yield from ((name, owner, member) for owner, member in module.PROTECTED)


@pytest.mark.parametrize("adapter, name, target", list(_entries("internals")))
def test_internal_exists(adapter, name, target):
    try:
        value = _lazy.load(target)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{adapter}.{name}: this TensorFlow has no {target} ({e}); update the adapter.")
    assert getattr(importlib.import_module(adapter), name) is value


@pytest.mark.parametrize("adapter, owner, member", list(_entries("protected")))
def test_protected_member_exists(adapter, owner, member):
    cls = _lazy.load(owner)
    if not hasattr(cls, member):
        assert hasattr(cls(), member), (
            f"{adapter}: this TensorFlow's {owner} has no {member}; update the adapter."
        )


def test_adapter_imports_no_tensorflow_until_used(run_python):
    result = run_python(
        """
        import sys
        import compat_distribute._tf, compat_distribute.testing._tf
        print(sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"))
        """,
        fresh=True,  # It asserts what a fresh interpreter has imported.
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_mirrored_extended_keeps_its_input_workers_as_host_device_pairs():
    # Fake TPU pods set this attribute (testing._tf.set_input_workers).
    import tensorflow as tf

    extended = tf.distribute.MirroredStrategy(["/cpu:0"]).extended
    (host, devices), = extended._input_workers_devices  # pylint: disable=protected-access
    cpu = "/job:localhost/replica:0/task:0/device:CPU:0"
    assert (host, devices) == (cpu, (cpu,))


def test_a_collectives_call_time_key_names_its_strategys_key_allocator():
    # multi_step_fix(strategy) tells a strategy's collectives by these members
    # (compat_distribute._tf.capture_collective_keys / collective_keys).
    import tensorflow as tf

    from compat_distribute import _patching, _tf
    from keras_helpers import two_cpu_mirrored

    strategy = two_cpu_mirrored()
    captured = []
    original = _tf.FuncGraph.capture_call_time_value

    def record(graph, closure, *args, **kwargs):
        captured.append(closure)
        return original(graph, closure, *args, **kwargs)

    @tf.function
    def step():
        return strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))
        )

    with _patching.Patch([(_tf.FuncGraph, "capture_call_time_value", record)]):
        results = strategy.experimental_local_results(step())
    assert [float(r) for r in results] == [2.0, 2.0]
    keys = {id(_tf.capture_collective_keys(closure)) for closure in captured}
    assert keys == {id(_tf.collective_keys(strategy.extended))}
    assert _tf.capture_collective_keys(lambda: 1) is None
