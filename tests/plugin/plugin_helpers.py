"""What the plugin's tests share: the fake's figures, a clean environment, a usage error's text.

Runs that configure TensorFlow devices use pytester's `runpytest_subprocess`
(a fresh TensorFlow runtime each); runs that change nothing in TensorFlow (bad
values, the header, an unreachable TPU, "auto" without a TPU) run in this process.
"""


import pytest

from compat_distribute.testing import devices
from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY
from compat_distribute.testing._fake_tpu import PRESETS
from compat_distribute.testing._fake_tpu import PRESETS
from compat_distribute.testing._fake_tpu import topologies
from compat_distribute.testing.pytest import options

ENV_VARS = tuple(option.env for option in options.OPTIONS) + ("TPU_NAME", "XLA_FLAGS")
DEFAULT_CORES = PRESETS[DEFAULT_TOPOLOGY].cores
DEFAULT_FAKE = f"fake ({DEFAULT_TOPOLOGY}, {DEFAULT_CORES} cores on CPU"  # ")" left off
LIMIT = devices.MAX_DEVICES
MAX_HOSTS = max(preset.hosts for preset in PRESETS.values())
POD = "v3-32"  # 4 hosts of 8 cores
POD_HOSTS, POD_CORES = PRESETS[POD].hosts, PRESETS[POD].cores


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """No option from this session's environment leaks into the runs under test (import it)."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def fake_refuses(topology, hosts):
    """What the fake itself says of `hosts=` for `topology` (the settings quote it)."""
    try:
        topologies.host_count(topology, hosts)
    except ValueError as e:
        return str(e)
    raise AssertionError(f"the fake takes hosts={hosts} for {topology}")


def usage_error(result):
    """The stderr of a pytester run that must have stopped with a usage error."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    return result.stderr.str()
