"""`TestCase`: `tf.test.TestCase` with the harness's TPU-or-fake strategy.

For absltest / unittest users; settings from the plugin's environment variables.
"""

import os

import tensorflow as tf

from compat_distribute.testing import _backend
from compat_distribute.testing import devices
from compat_distribute.testing.pytest import options


class TestCase(tf.test.TestCase):
    """A `tf.test.TestCase` whose class builds one TPU-or-fake strategy, on first use.

    `setUpClass` reads the settings (a bad value, or a host count the topology
    does not have, raises `ValueError` naming the environment variable) and
    splits the CPU when COMPAT_DISTRIBUTE_TF_DEVICES (or XLA_FLAGS'
    --xla_force_host_platform_device_count) asks for it; a count below the
    fake TPU's cores raises `ValueError` when the TPU is first used.
    `tpu_resolver` and `tpu_strategy` are built on first use and shared by the
    class's tests (a pod on its own hosts by every class of the process). A TPU
    named by COMPAT_DISTRIBUTE_TPU must be reachable: otherwise `tpu_resolver`
    raises `TPUUnreachableError` rather than fall back to the fake.
    """

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._compat_distribute_settings = options.from_environment(os.environ)
        cls._compat_distribute_backend = None
        cls._compat_distribute_resolver = None
        cls._compat_distribute_strategy = None
        tf_devices = cls._compat_distribute_settings.tf_devices
        if tf_devices:
            devices.set_virtual_devices(tf_devices)

    @property
    def tpu_backend(self):
        """Which TPU this class runs on (`describe()` says it in words)."""
        cls = type(self)
        if cls._compat_distribute_backend is None:
            settings = cls._compat_distribute_settings
            backend = _backend.choose(settings)
            if not backend.is_real:
                options.check_devices_hold_fake(settings, backend.local_cores)
            cls._compat_distribute_backend = backend
        return cls._compat_distribute_backend

    @property
    def tpu_resolver(self):
        """The resolver of the chosen TPU (a real TPU's, or the fake's), made once per class."""
        cls = type(self)
        if cls._compat_distribute_resolver is None:
            cls._compat_distribute_resolver = self.tpu_backend.make_resolver()
        return cls._compat_distribute_resolver

    @property
    def tpu_strategy(self):
        """`compat_distribute.TPUStrategy` on the chosen TPU, built once per class."""
        cls = type(self)
        if cls._compat_distribute_strategy is None:
            import compat_distribute  # pylint: disable=g-import-not-at-top

            cls._compat_distribute_strategy = compat_distribute.TPUStrategy(self.tpu_resolver)
        return cls._compat_distribute_strategy
