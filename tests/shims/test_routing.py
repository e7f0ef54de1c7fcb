"""install() routes every historical spelling to the shims; uninstall() restores TF exactly."""

import json

import pytest
import tensorflow as tf

import compat_distribute as cd
from compat_distribute import _routing

V1 = tf.compat.v1.distribute.experimental
TF_TPU = V1.TPUStrategy
TF_MWMS = V1.MultiWorkerMirroredStrategy


def test_install_routes_and_uninstall_restores():
    cd.install()
    try:
        assert cd.is_installed()
        assert tf.compat.v1.distribute.experimental.TPUStrategy is cd.TPUStrategy
        assert (
            tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy
            is cd.MultiWorkerMirroredStrategy
        )
    finally:
        cd.uninstall()
    assert not cd.is_installed()
    assert V1.TPUStrategy is TF_TPU
    assert V1.MultiWorkerMirroredStrategy is TF_MWMS


def test_double_install_and_double_uninstall_are_safe():
    cd.install()
    cd.install()
    cd.uninstall()
    assert V1.MultiWorkerMirroredStrategy is TF_MWMS
    cd.uninstall()
    assert V1.MultiWorkerMirroredStrategy is TF_MWMS


def test_installed_nests_and_restores_the_state_it_found():
    with cd.installed():
        with cd.installed():
            assert V1.TPUStrategy is cd.TPUStrategy
        assert V1.TPUStrategy is cd.TPUStrategy
    assert V1.TPUStrategy is TF_TPU
    cd.install()
    try:
        with cd.installed():
            pass
        assert V1.TPUStrategy is cd.TPUStrategy
    finally:
        cd.uninstall()


def test_unmodified_tf1_code_gets_the_shim():
    with cd.installed():
        # Legacy code, as written for TF1:
        strategy = tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy(
            tf.distribute.experimental.CollectiveCommunication.AUTO
        )
        result = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(2.0)))
    assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    assert float(result) == 2.0


ROUTED = [s for s in _routing.SPELLINGS if s.routed]


def tf_name(spelling):
    obj = tf
    for part in spelling.path.split("."):
        obj = getattr(obj, part)
    return getattr(obj, spelling.name)


def test_every_routed_spelling_points_at_its_shim_and_back():
    originals = {s.spelling: tf_name(s) for s in ROUTED}
    with cd.installed():
        for s in ROUTED:
            assert tf_name(s) is getattr(cd, s.shim), s.spelling
    for s in ROUTED:
        assert tf_name(s) is originals[s.spelling], s.spelling


def test_no_public_name_shares_its_name_with_a_submodule():
    import pkgutil

    submodules = {m.name for m in pkgutil.iter_modules(cd.__path__)}
    assert not submodules & set(cd.__all__)


def test_public_names_work_in_any_lookup_order(run_python):
    # A submodule named like a function used to replace it once imported.
    result = run_python("""
        import itertools, subprocess, sys
        names = ["install", "installed", "is_installed", "uninstall"]
        for order in itertools.permutations(names):
            import compat_distribute as cd
            for name in order:
                getattr(cd, name)
            cd.install(); assert cd.is_installed(); cd.uninstall(); assert not cd.is_installed()
            with cd.installed():
                assert cd.is_installed()
            for mod in [m for m in sys.modules if m.startswith("compat_distribute")]:
                del sys.modules[mod]
        print("ok")
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "ok"


def _interleavings():
    # (start order, stop order) of install() and fake_tpu().
    for first in ("install", "fake"):
        for stop_first in ("install", "fake"):
            yield first, stop_first


@pytest.mark.parametrize("start_first,stop_first", list(_interleavings()))
def test_install_and_fake_tpu_restore_tf_in_every_order(start_first, stop_first):
    from compat_distribute.testing import fake_tpu

    names = [
        (tf.compat.v1.distribute.experimental, "TPUStrategy"),
        (tf.distribute.experimental, "TPUStrategy"),
        (tf.distribute.experimental, "MultiWorkerMirroredStrategy"),
        (tf.distribute, "TPUStrategy"),
        (tf.distribute.cluster_resolver, "TPUClusterResolver"),
    ]
    originals = [getattr(owner, name) for owner, name in names]
    fake = fake_tpu()
    starts = {"install": cd.install, "fake": fake.start}
    stops = {"install": cd.uninstall, "fake": fake.stop}
    starts[start_first]()
    starts["fake" if start_first == "install" else "install"]()
    # While both are on, every historical TPU spelling builds a fake strategy
    # with the V1 signature, whichever started first.
    for spelling in (tf.compat.v1.distribute.experimental, tf.distribute.experimental):
        assert spelling.TPUStrategy is cd.TPUStrategy
        strategy = spelling.TPUStrategy(
            tf.distribute.cluster_resolver.TPUClusterResolver(""), steps_per_run=2
        )
        assert strategy.num_replicas_in_sync == 8
        assert strategy.extended.steps_per_run == 2
    assert tf.distribute.TPUStrategy is not cd.TPUStrategy  # the fake's own TF2 class
    assert tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver("")).num_replicas_in_sync == 8
    stops[stop_first]()
    stops["fake" if stop_first == "install" else "install"]()
    assert [getattr(owner, name) for owner, name in names] == originals


# The inventory: every name TensorFlow 2.21 exports for the strategy classes is
# a row of SPELLINGS, and each row's name exists here.

_STRATEGY_CLASSES = (
    "TPUStrategy",
    "MultiWorkerMirroredStrategy",
    "CollectiveAllReduceStrategy",
)


def _exported_spellings():
    found = set()
    for root in ("", "compat.v1.", "compat.v2."):
        for sub in ("distribute", "distribute.experimental"):
            path = root + sub
            owner = _routing._patching.tf_object(path)  # pylint: disable=protected-access
            for name in _STRATEGY_CLASSES:
                if isinstance(getattr(owner, name, None), type):
                    found.add((path, name))
    return found


def test_the_inventory_lists_every_strategy_name_tensorflow_exports():
    listed = {(s.path, s.name) for s in _routing.SPELLINGS}
    assert _exported_spellings() - listed == set()


@pytest.mark.parametrize("spelling", _routing.SPELLINGS, ids=lambda s: s.spelling)
def test_each_listed_spelling_exists_in_tensorflow_today(spelling):
    # tf.contrib's names are _contrib.ROUTES (tests/shims/test_contrib.py).
    assert isinstance(tf_name(spelling), type)
    assert spelling.versions.endswith("-2.21")


# Each routed spelling, called as the code of its era called it.


def _replica_ids(strategy, run):
    @tf.function
    def step():
        return run(
            lambda: tf.cast(
                tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32
            )
        )

    return [float(v) for v in strategy.experimental_local_results(step())]


def test_tf1_14_tpu_strategy_with_steps_per_run_then_experimental_run_v2():
    from compat_distribute.testing import FakeTPUClusterResolver

    with cd.installed():
        # TF 1.14-1.15: the V1 class under tf.distribute.experimental.
        strategy = tf.distribute.experimental.TPUStrategy(
            FakeTPUClusterResolver("v3-8"), steps_per_run=5
        )
        with pytest.warns(DeprecationWarning, match="experimental_run_v2 is deprecated"):
            run = strategy.experimental_run_v2
        assert _replica_ids(strategy, run) == [float(i) for i in range(8)]
    assert strategy.steps_per_run == strategy.extended.steps_per_run == 5


def test_tf2_0_tpu_strategy_with_a_device_assignment_second_then_experimental_run_v2():
    from compat_distribute.testing import FakeTPUClusterResolver, initialize_tpu_system

    resolver = FakeTPUClusterResolver("v3-8")
    assignment = tf.tpu.experimental.DeviceAssignment.build(
        initialize_tpu_system(resolver), computation_shape=[1, 1, 1, 2], num_replicas=4
    )
    with cd.installed():
        # TF 2.0-2.2: tf.distribute.experimental.TPUStrategy(resolver, device_assignment).
        for spelling in (tf.distribute.experimental, tf.compat.v2.distribute.experimental):
            strategy = spelling.TPUStrategy(resolver, assignment)
            assert strategy.num_replicas_in_sync == 4
            assert strategy.steps_per_run == 1
            with pytest.warns(DeprecationWarning, match="experimental_run_v2 is deprecated"):
                run = strategy.experimental_run_v2
            assert _replica_ids(strategy, run) == [0.0, 1.0, 2.0, 3.0]


def test_tf1_compat_v1_tpu_strategy_positional_steps_per_run():
    from compat_distribute.testing import FakeTPUClusterResolver

    with cd.installed():
        strategy = tf.compat.v1.distribute.experimental.TPUStrategy(
            FakeTPUClusterResolver("v3-8"), 7
        )
    assert strategy.extended.steps_per_run == 7
    with pytest.raises(TypeError, match=r"steps_per_run must be a positive int; got '7' \(str\)"):
        cd.TPUStrategy(FakeTPUClusterResolver("v3-8"), "7")


@pytest.mark.parametrize(
    "spelling",
    ["distribute.experimental", "compat.v2.distribute.experimental", "compat.v1.distribute.experimental"],
)
def test_tf2_0_multi_worker_strategy_with_communication_then_experimental_run_v2(spelling):
    with cd.installed():
        cls = getattr(_routing._patching.tf_object(spelling), "MultiWorkerMirroredStrategy")  # pylint: disable=protected-access
        # TF 2.0-2.3: communication= first, then experimental_run_v2.
        strategy = cls(communication=tf.distribute.experimental.CollectiveCommunication.RING)
        with pytest.warns(DeprecationWarning, match="experimental_run_v2 is deprecated"):
            result = strategy.experimental_run_v2(lambda x: x + 1.0, args=(tf.constant(2.0),))
    assert isinstance(strategy, cd.MultiWorkerMirroredStrategy)
    assert float(strategy.reduce("SUM", result)) == 3.0
    options = strategy.extended._communication_options  # pylint: disable=protected-access
    assert options.implementation is tf.distribute.experimental.CommunicationImplementation.RING


# What uninstall() leaves: the two process-wide changes that building a shim's
# strategy makes (documented in uninstall's docstring and docs/migration.md).
UNINSTALL_LEAVES = """
    import json
    import tensorflow as tf
    import compat_distribute as cd
    from compat_distribute import _patching, _tf
    from compat_distribute.testing import fake_tpu

    def started():
        owner = next(c for c in tf.keras.Model.__mro__ if "compile" in vars(c))
        return {
            "compile": len(_patching.values(owner, "compile")),
            "input": len(_patching.values(_tf.multi_device_iterator_ops,
                                          "_create_device_dataset")),
        }

    out = {"before": started()}
    with fake_tpu("v5litepod-1"):  # one replica: Keras 3 takes steps_per_execution
        cd.install()
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver("")
        strategy = tf.distribute.experimental.TPUStrategy(resolver, steps_per_run=2)
        dataset = tf.data.Dataset.range(16).batch(4)
        first = next(iter(strategy.experimental_distribute_dataset(dataset)))
        out["replicas"] = len(strategy.experimental_local_results(first))
        cd.uninstall()
        out["routed_after_uninstall"] = tf.distribute.experimental.TPUStrategy is cd.TPUStrategy
        out["after"] = started()
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
            model.compile("sgd", "mse")
        spe = model.steps_per_execution  # Keras 2 (TF 2.15) keeps it in a variable
        out["steps_per_execution"] = int(spe.numpy() if hasattr(spe, "numpy") else spe)
    print(json.dumps(out))
"""


def test_uninstall_leaves_the_strategies_process_wide_changes_on(run_python):
    result = run_python(UNINSTALL_LEAVES, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out == {
        "before": {"compile": 0, "input": 0},
        "replicas": 1,
        "routed_after_uninstall": False,
        "after": {"compile": 1, "input": 1},
        "steps_per_execution": 2,  # the strategy built before uninstall() still gives it
    }
