"""install() routes every historical spelling to the shims; uninstall() restores TF exactly."""

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
    # While both are on, V1 TPU code builds a strategy on the fake either way.
    strategy = tf.compat.v1.distribute.experimental.TPUStrategy(
        tf.distribute.cluster_resolver.TPUClusterResolver(""), steps_per_run=2
    )
    assert strategy.num_replicas_in_sync == 8
    stops[stop_first]()
    stops["fake" if stop_first == "install" else "install"]()
    assert [getattr(owner, name) for owner, name in names] == originals
