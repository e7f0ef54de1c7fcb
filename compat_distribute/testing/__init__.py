"""Test harness: virtual devices, a fake TPU, local multi-worker clusters."""

from compat_distribute.testing.devices import set_virtual_devices

__all__ = ("set_virtual_devices",)
