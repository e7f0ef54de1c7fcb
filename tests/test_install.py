"""install() routes the TF1 names to the shims and uninstall() restores TF exactly."""

import tensorflow as tf

import compat_distribute as cd

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
