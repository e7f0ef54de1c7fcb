"""Importing compat_distribute must not start TensorFlow's runtime."""

import pytest


@pytest.fixture(scope="module", name="after_import")
def after_import_fixture(run_python):
    """One fresh process: import with TF_CONFIG set, configure the runtime, then build
    the multi-worker strategy. Each check prints its own stdout line."""
    return run_python("""
        import json, os, socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ["TF_CONFIG"] = json.dumps({
            "cluster": {"worker": [f"127.0.0.1:{port}"]}, "task": {"type": "worker", "index": 0}})
        import compat_distribute as cd
        import compat_distribute.testing
        from tensorflow.python.eager import context
        assert context.context()._context_handle is None, "runtime started at import"
        import tensorflow as tf
        # Both fail once the runtime has started:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        tf.config.experimental.set_synchronous_execution(True)
        print("configurable", flush=True)
        # A one-worker cluster from TF_CONFIG: TF configures collective ops at
        # construction, which fails if anything started the runtime before.
        strategy = cd.MultiWorkerMirroredStrategy()
        print(strategy.num_replicas_in_sync, float(strategy.reduce("SUM", strategy.run(lambda: tf.constant(3.0)))))
        """)


def test_import_leaves_devices_and_collectives_configurable(after_import):
    assert after_import.stdout.splitlines()[:1] == ["configurable"], after_import.stderr


def test_collective_strategy_can_be_built_after_import(after_import):
    assert after_import.returncode == 0, after_import.stderr
    assert after_import.stdout.splitlines()[1:] == ["1 3.0"]


def test_import_the_pytest_plugin_and_the_command_import_no_tensorflow(run_python):
    # pytest imports the plugin through its entry point in every run; the
    # command answers --help and usage errors before TensorFlow loads.
    result = run_python("""
        import sys
        import compat_distribute, compat_distribute.testing
        import compat_distribute.testing.pytest.hooks, compat_distribute.smoke.cli
        assert "tensorflow" not in sys.modules, "tensorflow imported"
        print(sorted(compat_distribute.__all__))
        print(compat_distribute.TPUStrategy.__module__, "tensorflow" in sys.modules)
        print(compat_distribute.testing.FakeTPUClusterResolver.__name__)
        try:
            compat_distribute.NoSuchName
        except AttributeError as e:
            print(e)
        """, fresh=True)  # It asserts what a fresh interpreter has imported.
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "['CollectiveCommunication', 'MultiWorkerMirroredStrategy', 'TPUStrategy', 'install', "
        "'installed', 'is_installed', 'uninstall']",
        "compat_distribute.tpu True",
        "FakeTPUClusterResolver",
        "module 'compat_distribute' has no attribute 'NoSuchName'",
    ]


def test_lazy_names_resolve_after_their_module_left_sys_modules(run_python):
    # pytester's in-process runs restore sys.modules afterwards, dropping the
    # modules they imported first; names looked up later must still resolve.
    result = run_python(
        """
import sys
import compat_distribute
from compat_distribute import _tf
del sys.modules["compat_distribute._tf"], sys.modules["compat_distribute"]
print(_tf.MirroredExtended.__name__, compat_distribute.MultiWorkerMirroredStrategy.__name__)
"""
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["MirroredExtended", "MultiWorkerMirroredStrategy"]


# The privacy rule (docs/design.md): public is what a public module lists in
# __all__ and a docs page describes; every other module is internal.
PUBLIC_MODULES = (
    "compat_distribute",
    "compat_distribute.checkpoint",
    "compat_distribute.keras",
    "compat_distribute.testing",
)


def _docs_text():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    return "\n".join(p.read_text() for p in [root / "README.md", *(root / "docs").glob("*.md")])


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_is_described_in_the_docs(module):
    import importlib
    import re

    text = _docs_text()
    names = importlib.import_module(module).__all__
    undescribed = [n for n in names if not re.search(rf"\b{re.escape(n)}\b", text)]
    assert names and not undescribed, f"{module}.__all__ names what no page describes: {undescribed}"


def test_the_smoke_package_and_the_harness_switches_are_not_public():
    import compat_distribute.smoke
    import compat_distribute.testing

    assert not hasattr(compat_distribute.smoke, "__all__")
    for name in ("set_trace_mode", "pick_unused_port", "FakeTPUStrategyV1"):
        assert name not in compat_distribute.testing.__all__
        with pytest.raises(AttributeError):
            getattr(compat_distribute.testing, name)
