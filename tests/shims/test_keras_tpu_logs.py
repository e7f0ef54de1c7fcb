"""Both Kerases report on the fake TPU what they report on a TPU, on one host and on pods.

tf-keras (Keras 2) takes a TPU strategy's per-batch values from the first
replica and keeps its metrics sync-on-write there, so each batch's logs, the
progress bar and callbacks show the global values: one device's. Keras 3 reads
its sync-on-read metrics inside the replica, so on a TPU its per-batch logs are
replica 0's running values, while its epoch logs and `evaluate` are global. On
pods both put `predict`'s outputs back in the input's order, as on a TPU pod.
`keras_logs.py` runs the model and reads what the user sees; tf-keras runs in
subprocesses (`TF_USE_LEGACY_KERAS=1`), Keras 3 here and, for pods, in
subprocesses.
"""

import json
import os

import keras_logs
import numpy as np
import pytest
from support import programs

import compat_distribute
from compat_distribute import testing

HERE = os.path.dirname(os.path.abspath(__file__))
LEGACY_KERAS = {"TF_USE_LEGACY_KERAS": "1"}
KERAS_3 = {"TF_USE_LEGACY_KERAS": "0"}


def reports(env, *placements, timeout=300):
    """{placement: report} from `keras_logs.py` run in a subprocess (forked from a warm
    interpreter of its environment's own: the tf-keras programs share one)."""
    result = programs.run_program(
        [os.path.join(HERE, "keras_logs.py"), *placements],
        timeout=timeout,
        env=env,
        shared_env=True,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and len(lines) == len(placements), result.stderr[-5000:]
    return {r["where"]: r for r in (json.loads(line[len("RESULT ") :]) for line in lines)}


def assert_same_batch_logs(got, want):
    for kind in ("train", "test"):
        assert len(got[kind]) == len(want[kind]) == (4 if kind == "train" else 2)
        for got_logs, want_logs in zip(got[kind], want[kind]):
            assert got_logs.keys() == want_logs.keys() == {"loss", "mae"}
            for name in want_logs:
                np.testing.assert_allclose(got_logs[name], want_logs[name], rtol=1e-5)
    np.testing.assert_allclose(
        np.concatenate(got["predict"]), np.concatenate(want["predict"]), rtol=1e-5, atol=1e-6
    )


def assert_same_results(got, want):
    """Epoch logs, evaluate's result and predict's outputs (in input order) agree."""
    for name in ("loss", "mae"):
        np.testing.assert_allclose(got["epochs"][name], want["epochs"][name], rtol=1e-5)
    np.testing.assert_allclose(got["evaluate"], want["evaluate"], rtol=1e-5)
    np.testing.assert_allclose(got["predict"], want["predict"], rtol=1e-5, atol=1e-6)


def assert_reports_as_one_device(got, one_device):
    """tf-keras on a TPU: every per-batch value is one device's."""
    assert_same_batch_logs(got["batch_logs"], one_device["batch_logs"])
    np.testing.assert_allclose(got["progress_bar"], one_device["progress_bar"], atol=1e-4)
    assert_same_results(got, one_device)


def assert_first_batch_is(report, rows):
    loss, mae = keras_logs.first_batch_metrics(rows)
    first = report["batch_logs"]["train"][0]
    np.testing.assert_allclose([first["loss"], first["mae"]], [loss, mae], rtol=1e-5)
    np.testing.assert_allclose(report["progress_bar"][0], [1, loss, mae], atol=1e-4)


@pytest.fixture(scope="module", name="tf_keras_one_host")
def tf_keras_one_host_fixture():
    """tf-keras' reports on one device, a v3-8 (both ways) and a v3-32 on one host: one process."""
    return reports(LEGACY_KERAS, "one-device", "v3-8", "shim:v3-8", "v3-32:hosts=1")


def test_one_device_logs_the_whole_batch(tf_keras_one_host):
    one_device = tf_keras_one_host["one-device"]
    assert one_device["replicas"] == 1
    assert_first_batch_is(one_device, keras_logs.BATCH)
    # 2 epochs of 2 batches: the bar shows each batch.
    assert [update[0] for update in one_device["progress_bar"]] == [1, 2, 1, 2]


@pytest.mark.parametrize(
    "where, replicas", [("v3-8", 8), ("shim:v3-8", 8), ("v3-32:hosts=1", 32)]
)
def test_tf_keras_on_one_host_reports_one_devices_values(tf_keras_one_host, where, replicas):
    # Under fake_tpu() and through compat_distribute.TPUStrategy on the resolver:
    # the first replica's value, as on a TPU, which is the global one. Before,
    # each per-batch value was the sum over the replicas (32 of them on the v3-32).
    report = tf_keras_one_host[where]
    assert report["replicas"] == replicas
    assert_reports_as_one_device(report, tf_keras_one_host["one-device"])


@pytest.mark.multi_worker
def test_tf_keras_on_a_pod_of_host_processes_reports_one_devices_values(tf_keras_one_host):
    # A pod a process: connecting to it binds the process to its cluster. A v4-16
    # (2 hosts of 4 cores): the hosts are the point here, 32 replicas the test above's.
    got = reports(LEGACY_KERAS, "v4-16", timeout=600)["v4-16"]
    assert got["replicas"] == 8
    assert_reports_as_one_device(got, tf_keras_one_host["one-device"])


@pytest.fixture(scope="module", name="keras_3_one_device")
def keras_3_one_device_fixture():
    keras = pytest.importorskip("keras")
    import tensorflow as tf

    return keras_logs.report(tf.distribute.get_strategy(), keras)


@pytest.mark.requires_keras3
@pytest.mark.parametrize(
    "built, topology, hosts",
    [("fake_tpu", "v3-8", None), ("shim", "v3-8", None), ("fake_tpu", "v4-16", 1)],
    ids=["v3-8-fake_tpu", "v3-8-shim", "v4-16-hosts-1"],
)
def test_keras_3_on_one_host_logs_the_first_replicas_share_per_batch(
    keras_3_one_device, built, topology, hosts
):
    # A pod's preset on one host too (on this process's 8 CPUs); on one host
    # predict's outputs come in input order without Keras' reordering.
    import keras
    import tensorflow as tf

    if built == "fake_tpu":
        with testing.fake_tpu(topology, hosts=hosts):
            strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver())
            report = keras_logs.report(strategy, keras)
    else:
        strategy = compat_distribute.TPUStrategy(testing.FakeTPUClusterResolver(topology))
        report = keras_logs.report(strategy, keras)
    assert report["replicas"] == 8
    assert_first_batch_is(keras_3_one_device, keras_logs.BATCH)
    assert_first_batch_is(report, keras_logs.BATCH // 8)  # replica 0's 8 rows
    assert_same_results(report, keras_3_one_device)


@pytest.mark.multi_worker
@pytest.mark.requires_keras3
def test_keras_3_on_a_v3_32_pod_predicts_in_input_order(keras_3_one_device):
    # Keras 3 puts a TPU pod's outputs back in input order only for classes it
    # takes for a TPUStrategy; before the fake was one, predict came back in
    # host-major order. A v3-32 (4 hosts, 32 replicas): the pod, whose
    # first Keras 3 step took minutes (32 replicas traced one by one).
    got = reports(KERAS_3, "v3-32", timeout=600)["v3-32"]
    assert got["replicas"] == 32
    assert_first_batch_is(got, keras_logs.BATCH // 32)
    assert_same_results(got, keras_3_one_device)


# Every place tf-keras branches on `is_tpu_strategy`, on the fake as on a TPU.
TF_KERAS_TPU_SITES = """
    import json, tempfile
    import numpy as np
    import tensorflow as tf
    from compat_distribute.testing import set_virtual_devices
    set_virtual_devices(8)
    import compat_distribute
    from compat_distribute import testing
    from tf_keras.src import backend

    out = {}
    fake = compat_distribute.TPUStrategy(testing.FakeTPUClusterResolver("v3-8"), steps_per_run=4)
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    out["is_tpu"] = [backend.is_tpu_strategy(s) for s in (fake, mirrored, None)]
    for name, strategy in (("fake", fake), ("mirrored", mirrored)):
        with strategy.scope():
            metric = tf.keras.metrics.Mean()
        out[name + "_metric_sync"] = metric.variables[0].synchronization.name
    class Logs(tf.keras.callbacks.Callback):
        seen = []
        def on_train_batch_end(self, batch, logs=None):
            self.seen.append({k: float(v) for k, v in logs.items()})
    with fake.scope():  # the issue's example
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, kernel_initializer="ones")])
        model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    model.fit(np.ones((64, 1)), np.full((64, 1), 5.0), batch_size=64, verbose=0,
              callbacks=[Logs()])
    out["ones_against_fives"] = Logs.seen
    with fake.scope():  # called in cross-replica context: once, on sync-on-write variables
        metric = tf.keras.metrics.Mean()
        out["metric_called"] = [float(metric([1.0, 3.0])), float(metric([8.0]))]
    with tf.Graph().as_default():  # a TF1 graph: the fake runs MirroredStrategy's loop there
        out["is_tpu_in_graph"] = backend.is_tpu_strategy(fake)

    outside = tf.keras.metrics.Mean()
    @tf.function
    def update():
        fake.run(lambda: outside.update_state(1.0))
    try:
        update()
    except ValueError as error:
        out["metric_outside_scope"] = str(error)

    with fake.scope():
        model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    with tempfile.TemporaryDirectory() as directory:
        checkpoint = directory + "/weights"
        model.save_weights(checkpoint)
        try:
            model.load_weights(checkpoint)
        except ValueError as error:
            out["load_weights"] = str(error)
    print("RESULT " + json.dumps(out))
"""


def test_tf_keras_takes_the_fake_for_a_tpu_where_it_asks():
    result = programs.run_python(TF_KERAS_TPU_SITES, timeout=300, env=LEGACY_KERAS, shared_env=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-5000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["is_tpu"] == [True, False, False]
    assert out["ones_against_fives"] == [{"loss": 16.0, "mae": 4.0}]  # not 128.0 and 32.0
    assert out["is_tpu_in_graph"] is False
    # Metrics are sync-on-write on a TPU (tf-keras' TODO b/120571621), so the
    # first replica's value is the global one.
    assert out["fake_metric_sync"] == "ON_WRITE"
    assert out["mirrored_metric_sync"] == "ON_READ"
    assert out["metric_called"] == [2.0, 4.0]  # the means of [1, 3] and of [1, 3, 8]
    # tf-keras' refusals on a TPU, word for word.
    # (after the traceback of the user's code that tf.function puts first)
    assert out["metric_outside_scope"].strip().endswith(
        "Trying to run metric.update_state in replica context when the metric was not "
        "created in TPUStrategy scope. Make sure the keras Metric is created in "
        "TPUstrategy scope."
    )
    assert out["load_weights"] == (
        "Load weights is not implemented with TPUStrategy with `steps_per_run` greater "
        "than 1. The `steps_per_run` is 4"
    )


@pytest.mark.requires_keras3
def test_keras_3_takes_the_fake_for_a_tpu_whichever_name_built_it():
    # Its pods' predict order asks by class name (see the v3-32 pod test above).
    from keras.src.backend.tensorflow import trainer
    import tensorflow as tf

    fake = compat_distribute.TPUStrategy(testing.FakeTPUClusterResolver("v3-8"))
    assert trainer._is_tpu_strategy(fake)  # pylint: disable=protected-access
    assert not trainer._is_tpu_strategy(tf.distribute.get_strategy())  # pylint: disable=protected-access
