"""A new preset is one row of the table (`topologies._TABLE`): every reader offers it.

The row is added for one test (monkeypatch); the resolver, `fake_tpu()`, the
chooser, `TestCase` (the plugin's settings) and `compat-distribute smoke
--topology` all see it, with nothing else changed.
"""

import pytest
import tensorflow as tf
from support.steps import replica_ids_summed

import compat_distribute
from compat_distribute.smoke import cli
from compat_distribute.smoke import table as smoke_table
from compat_distribute.smoke import targets as smoke_targets
from compat_distribute.smoke import checks as smoke_checks
from compat_distribute.testing import PRESETS
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import fake_tpu
from compat_distribute.testing import testcase
from compat_distribute.testing import _backend
from compat_distribute.testing._fake_tpu import topologies

NEW = topologies.Preset("v9-4", (2, 2, 1, 1))  # a made-up slice: 4 single-core chips


@pytest.fixture(name="new_row")
def new_row_fixture(monkeypatch):
    monkeypatch.setitem(topologies._TABLE, NEW.name, NEW)  # pylint: disable=protected-access
    return NEW


def test_without_the_row_the_name_is_refused():
    assert "v9-4" not in PRESETS
    with pytest.raises(ValueError, match="Unknown TPU topology 'v9-4'; the presets are 'v2-8'"):
        FakeTPUClusterResolver("v9-4")
    with pytest.raises(SystemExit):
        cli.build_smoke_parser().parse_args(["--topology", "v9-4"])


def test_the_resolver_and_fake_tpu_build_the_new_slice(new_row):
    assert PRESETS["v9-4"] is new_row  # the public, read-only view of the table
    resolver = FakeTPUClusterResolver("v9-4")
    assert (resolver.num_cores, resolver.num_hosts) == (4, 1)
    assert resolver.num_accelerators() == {"TPU": 4}
    strategy = compat_distribute.TPUStrategy(resolver, steps_per_run=2)
    assert replica_ids_summed(strategy) == [6.0] * 4
    with fake_tpu("v9-4"):
        tpu = tf.distribute.cluster_resolver.TPUClusterResolver("any-name")
        assert tpu.topology_name == "v9-4"
        assert tf.distribute.TPUStrategy(tpu).num_replicas_in_sync == 4


def test_the_chooser_and_testcase_offer_the_new_slice(new_row, monkeypatch):
    backend = _backend.choose_backend("fake", topology="v9-4")
    assert (backend.kind, backend.num_cores, backend.hosts) == ("fake", 4, 1)
    assert backend.describe() == "fake (v9-4, 4 cores on CPU)"
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY", "v9-4")

    class NewSliceTest(testcase.TestCase):
        def runTest(self):  # pylint: disable=invalid-name
            pass

    NewSliceTest.setUpClass()
    try:
        case = NewSliceTest()
        assert case.tpu_backend == backend
        assert case.tpu_strategy.num_replicas_in_sync == 4
    finally:
        NewSliceTest.tearDownClass()


def test_the_smoke_command_offers_and_runs_on_the_new_slice(new_row):
    assert "v9-4" in smoke_table.topologies()
    parser = cli.build_smoke_parser()
    args = parser.parse_args(["--topology", "v9-4"])
    cli._check_fake_options(args, parser)  # pylint: disable=protected-access
    target = smoke_targets.target(_backend.choose_backend(args.tpu, topology=args.topology), 1)
    assert (target.device, target.replicas) == ("fake (v9-4, 4 cores on CPU)", 4)
    assert target.info == {"hardware": "fake_tpu", "topology": "v9-4", "hosts": 1}
    assert smoke_checks.check_replicas(target, {}) == "4 replicas in sync on 4 worker devices"
