"""The TPU under test, as TPU code sees it: TensorFlow's TPU entry points.

On the fake (`--tpu=fake`, the default) each test runs inside a `FakeTPU` of the
session's slice (a pod preset such as v3-32 too: its hosts start once), so
`tf.tpu.experimental.initialize_tpu_system` and `tf.distribute.TPUStrategy`
reach the fake; on a real TPU (`--tpu=auto` or a name) they are TensorFlow's own. The tests are written once, as TPU code.
"""

import gc

import pytest
import tensorflow as tf

from compat_distribute.testing import FakeTPU
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import initialize_tpu_system


@pytest.fixture(name="on_fake", scope="session")
def on_fake_fixture(tpu_resolver):
    return isinstance(tpu_resolver, FakeTPUClusterResolver)


@pytest.fixture(autouse=True)
def tpu_entry_points(tpu_resolver, on_fake):
    if not on_fake:
        yield
        return
    # The session's slice; a pod's hosts are the session resolver's, started once.
    with FakeTPU.of(tpu_resolver):
        yield


@pytest.fixture(name="topology", scope="session")
def topology_fixture(tpu_resolver):
    """The slice's `tf.tpu.experimental.Topology` (initialised once for the session)."""
    if isinstance(tpu_resolver, FakeTPUClusterResolver):
        return initialize_tpu_system(tpu_resolver)
    return tf.tpu.experimental.initialize_tpu_system(tpu_resolver)


@pytest.fixture(name="packed", params=[True, False], ids=["packed", "unpacked"])
def packed_fixture(request, tpu_strategy):
    """Runs a test with variables packed (TPUStrategyV2's default) and not, as TF's tests do."""
    # pylint: disable=protected-access
    tpu_strategy._enable_packed_variable_in_eager_mode = request.param
    yield request.param
    tpu_strategy._enable_packed_variable_in_eager_mode = True


@pytest.fixture(autouse=True, scope="module")
def free_iterators_before_exit():
    """Frees the module's iterators while TensorFlow still runs (see tests/fake_tpu)."""
    yield
    gc.collect()
