"""Inside fake_tpu(), a resolver built as Cloud and Colab notebooks build it answers as theirs.

From a TPU name, a grpc:// address, TPU_NAME or COLAB_TPU_ADDR:
`cluster_spec().as_dict()` has a `worker` job and `master()` a grpc://
address. Nothing connects there (only loopback addresses are named here, and
no server listens on them): TF1 sessions and connects naming it run on the
fake in this process, and a TF1 session sees every core.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from support.steps import replica_ids_summed

from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import fake_tpu

TPU_ENV = ("TPU_NAME", "COLAB_TPU_ADDR", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS")


@pytest.fixture(name="env", autouse=True)
def env_fixture(monkeypatch):
    for name in TPU_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    "tpu, environ, address",
    [
        ("my-tpu", {}, "127.0.0.1:8470"),  # a name: TF's TPU port, on loopback
        ("grpc://127.0.0.1:8471", {}, "127.0.0.1:8471"),
        (None, {"TPU_NAME": "grpc://127.0.0.1:8472"}, "127.0.0.1:8472"),
        (None, {"TPU_NAME": "my-tpu"}, "127.0.0.1:8470"),
        (None, {"COLAB_TPU_ADDR": "127.0.0.1:8473"}, "127.0.0.1:8473"),
        ("", {"COLAB_TPU_ADDR": "127.0.0.1:8473"}, "127.0.0.1:8473"),
        # TF reads TPU_NAME first, then Colab's variable.
        (None, {"TPU_NAME": "grpc://127.0.0.1:8474", "COLAB_TPU_ADDR": "127.0.0.1:8473"},
         "127.0.0.1:8474"),
    ],
)
def test_a_resolver_built_as_in_the_cloud_answers_as_a_cloud_one(env, tpu, environ, address):
    for name, value in environ.items():
        env.setenv(name, value)
    with fake_tpu():
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu)
        # As every tensorflow/tpu Keras notebook prints it.
        assert resolver.cluster_spec().as_dict()["worker"] == [address]
        assert resolver.master() == "grpc://" + address
        assert resolver.get_master() == "grpc://" + address
        assert resolver.num_accelerators() == {"TPU": 8}
        assert resolver.address == address


@pytest.mark.parametrize("tpu", ["", None, "local"])
def test_a_local_tpu_stays_local(tpu):
    with fake_tpu():
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu)
        assert (resolver.master(), resolver.cluster_spec().as_dict()) == ("", {})
        assert resolver.address is None


def test_the_colab_set_up_runs_on_the_fake_without_connecting(env):
    env.setenv("COLAB_TPU_ADDR", "127.0.0.1:8470")
    with fake_tpu():
        # The set-up of the tensorflow/tpu Colab notebooks (TF 2.1-2.3), as written.
        address = "grpc://" + os.environ["COLAB_TPU_ADDR"]
        tpu = tf.distribute.cluster_resolver.TPUClusterResolver(address)
        assert tf.config.experimental_connect_to_cluster(tpu) is None
        assert tf.config.experimental_connect_to_host(tpu.master(), "worker") is None
        assert tf.config.experimental_connect_to_cluster(tpu.cluster_spec()) is None
        tf.tpu.experimental.initialize_tpu_system(tpu)
        strategy = tf.distribute.TPUStrategy(tpu)
        assert replica_ids_summed(strategy) == [28.0] * 8
        # This process holds no remote device: nothing was connected.
        assert not [d for d in tf.config.list_logical_devices() if "/job:worker" in d.name]


def _graph_on_every_core():
    """A graph with one op on each of the 8 cores; returns (graph, [op outputs])."""
    graph = tf.Graph()
    with graph.as_default():
        outputs = []
        for i in range(8):
            with tf.device(f"/device:CPU:{i}"):
                outputs.append(tf.constant(float(i)) * 2.0)
    return graph, outputs


def test_a_tf1_session_on_the_fakes_master_with_its_cluster_def_sees_every_core(env):
    with fake_tpu():
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver("grpc://127.0.0.1:8470")
        # What TF1 TPU programs wrote: their own config, with the resolver's cluster.
        config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=20_000)
        config.cluster_def.CopyFrom(resolver.cluster_spec().as_cluster_def())
        graph, outputs = _graph_on_every_core()
        with tf.compat.v1.Session(resolver.master(), graph=graph, config=config) as session:
            cpus = [d.name for d in session.list_devices() if d.device_type == "CPU"]
            assert len(cpus) == 8
            ran = session.run(outputs)
        assert ran == [2.0 * i for i in range(8)]
        assert config.cluster_def.job[0].name == "worker"  # the caller's config is left alone


def test_a_tf1_session_here_sees_every_core_without_soft_placement():
    with fake_tpu():
        graph, outputs = _graph_on_every_core()
        config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
        with tf.compat.v1.Session(graph=graph, config=config) as session:
            assert np.allclose(session.run(outputs), [2.0 * i for i in range(8)])
            run_metadata = tf.compat.v1.RunMetadata()
            session.run(
                outputs[7],
                options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                run_metadata=run_metadata,
            )
        devices = {stats.device for stats in run_metadata.step_stats.dev_stats}
        assert any(device.endswith("CPU:7") for device in devices), devices


def test_outside_the_fake_sessions_are_tensorflows():
    graph, outputs = _graph_on_every_core()
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        with pytest.raises(tf.errors.InvalidArgumentError, match="CPU:1"):
            session.run(outputs)


def test_an_address_is_refused_for_a_pod_and_when_malformed():
    with pytest.raises(ValueError, match=r"address must be 'host:port' .*; got 'grpc://x'"):
        FakeTPUClusterResolver(address="grpc://x")
    with pytest.raises(ValueError, match="address applies to a one-host slice; got '127.0.0.1:8470'"):
        FakeTPUClusterResolver("v4-16", address="127.0.0.1:8470")
