"""The plug-in point of `compat_distribute.TPUStrategy`: a resolver names its backend.

The one place that tests the contract (`tpu.TPUBackend`, `tpu.BACKEND_ATTRIBUTE`):
a resolver class names a builder by a "module:function" path, the core loads
it on first use and calls it with the checked arguments.
"""

import pytest
import tensorflow as tf

import compat_distribute as cd
from compat_distribute import multi_worker
from compat_distribute import tpu
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing._fake_tpu import strategy as fake_strategy

BUILT = []  # (resolver, keyword arguments) of each call of `record`


def record(resolver, *, steps_per_run, device_assignment, spmd_xla_partitioning):
    """A `tpu.TPUBackend` that returns a marker instead of a strategy."""
    BUILT.append((resolver, steps_per_run, device_assignment, spmd_xla_partitioning))
    return "built by record"


class RecordingResolver(tf.distribute.cluster_resolver.SimpleClusterResolver):
    """A resolver of no TPU that names `record` as its backend."""

    def __init__(self):
        super().__init__(tf.train.ClusterSpec({}))


setattr(RecordingResolver, tpu.BACKEND_ATTRIBUTE, f"{__name__}:record")


@pytest.fixture(name="built")
def built_fixture():
    BUILT.clear()
    yield BUILT
    BUILT.clear()


def test_the_named_backend_builds_the_strategy_from_checked_arguments(built):
    resolver = RecordingResolver()
    assert cd.TPUStrategy(resolver, steps_per_run=3) == "built by record"
    assert built == [(resolver, 3, None, False)]
    cd.TPUStrategy(resolver)  # steps_per_run None: the checked default
    assert built[-1] == (resolver, 1, None, False)


def test_bad_arguments_never_reach_the_backend(built):
    with pytest.raises(ValueError, match="steps_per_run must be"):
        cd.TPUStrategy(RecordingResolver(), steps_per_run=0)
    with pytest.raises(TypeError, match="device_assignment must be None or a tf.tpu."):
        cd.TPUStrategy(RecordingResolver(), device_assignment="0")
    assert built == []


def test_a_resolver_naming_a_backend_is_a_tpu_resolver(built):
    assert tpu.is_tpu_resolver(RecordingResolver())
    assert not tpu.is_tpu_resolver(None)
    with pytest.raises(TypeError, match="must describe a multi-worker cluster"):
        multi_worker.MultiWorkerMirroredStrategy(cluster_resolver=RecordingResolver())
    assert built == []


def test_the_fake_names_its_strategy_module_build():
    assert tpu.backend_of(FakeTPUClusterResolver) is fake_strategy.build
    assert tpu.backend_of(tf.distribute.cluster_resolver.TPUClusterResolver) is None
