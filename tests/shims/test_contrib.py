"""tf.contrib under install(): TF 1.12-1.15's distribution names, eager and in a TF1 graph."""

import json

import pytest
import tensorflow as tf

import compat_distribute as cd
from compat_distribute import _contrib
from compat_distribute import _lazy
from compat_distribute.testing import fake_tpu

AVAILABLE = (
    "tf.contrib does not exist in TensorFlow 2; compat_distribute.install() provides only "
    "tf.contrib.distribute: TPUStrategy, initialize_tpu_system, CollectiveAllReduceStrategy, "
    "MirroredStrategy, OneDeviceStrategy, DistributionStrategy, DistributionStrategyExtended, "
    "ReplicaContext, CrossDeviceOps, ReductionToOneDeviceCrossDeviceOps, get_replica_context, "
    "in_cross_replica_context, get_distribution_strategy, has_distribution_strategy, "
    "get_loss_reduction; tf.contrib.cluster_resolver: TPUClusterResolver, "
    "TFConfigClusterResolver, SimpleClusterResolver, ClusterResolver, UnionClusterResolver, "
    "GCEClusterResolver, KubernetesClusterResolver, SlurmClusterResolver."
)


def test_install_adds_tf_contrib_and_uninstall_removes_it():
    assert not hasattr(tf, "contrib")
    with cd.installed():
        assert sorted(dir(tf.contrib)) == ["cluster_resolver", "distribute"]
        assert tf.contrib.distribute.TPUStrategy is cd.TPUStrategy
        assert tf.contrib is tf.contrib  # one module object
    assert not hasattr(tf, "contrib")
    assert "contrib" not in vars(tf)


# TF 1.14-1.15 code in tensorflow/tpu and tensorflow/models imported tf.contrib's
# modules; code migrated with `import tensorflow.compat.v1 as tf` reaches it there.
IMPORT_PROGRAM = """
    import sys
    import compat_distribute
    compat_distribute.install()
    import tensorflow as tf
    import tensorflow.compat.v1 as tf1
    from tensorflow.contrib import cluster_resolver as contrib_cluster_resolver
    from tensorflow.contrib import distribute as contrib_distribute
    assert tf1.contrib is tf.contrib
    assert contrib_distribute is tf.contrib.distribute
    assert contrib_cluster_resolver is tf.contrib.cluster_resolver
    assert contrib_distribute.TPUStrategy is compat_distribute.TPUStrategy
    compat_distribute.uninstall()
    assert not hasattr(tf1, "contrib") and not hasattr(tf, "contrib")
    assert not [name for name in sys.modules if name.startswith("tensorflow.contrib")]
    try:
        from tensorflow.contrib import distribute
    except ModuleNotFoundError as error:
        print(error)
"""


def test_contrib_modules_import_and_sit_on_compat_v1_until_uninstall(run_python):
    # A fresh process: `import tensorflow.compat.v1` after install() is the case.
    result = run_python(IMPORT_PROGRAM)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["No module named 'tensorflow.contrib'"]


@pytest.mark.parametrize("route", [r for r in _contrib.ROUTES if not r.params],
                         ids=lambda r: r.spelling)
def test_each_plain_route_is_its_target(route):
    with cd.installed():
        module = getattr(tf.contrib, route.module)
        assert getattr(module, route.name) is _lazy.load(route.target)
        assert route.name in dir(module)


@pytest.mark.parametrize(
    "get, text",
    [
        (lambda: tf.contrib.layers,
         "In TensorFlow 2, tf.contrib.layers is tf.keras.layers, or the tf_slim package. "),
        (lambda: tf.contrib.distribute.ParameterServerStrategy,
         "tf.contrib.distribute.ParameterServerStrategy has no TensorFlow 2 equivalent: use "
         "tf.compat.v1.distribute.experimental.ParameterServerStrategy(cluster_resolver) "
         "(TF2's takes a cluster resolver). "),
        (lambda: tf.contrib.cluster_resolver.NoSuchResolver,
         "tf.contrib.cluster_resolver.NoSuchResolver did not survive: see "
         "https://github.com/tensorflow/community/blob/master/rfcs/20180907-contrib-sunset.md "
         "for where each module went. "),
    ],
    ids=["moved-module", "gone-name", "unknown-name"],
)
def test_other_contrib_names_raise_attribute_error_saying_where_they_went(get, text):
    with cd.installed():
        with pytest.raises(AttributeError) as raised:
            get()
    assert str(raised.value) == text + AVAILABLE


def test_collective_all_reduce_strategy_maps_its_tf1_keywords():
    ring = tf.distribute.experimental.CollectiveCommunication.RING
    with cd.installed():
        strategy = tf.contrib.distribute.CollectiveAllReduceStrategy(0, communication=ring)
        with pytest.raises(ValueError) as raised:
            tf.contrib.distribute.CollectiveAllReduceStrategy(num_gpus_per_worker=2)
        with pytest.raises(TypeError) as unknown:
            tf.contrib.distribute.CollectiveAllReduceStrategy(cluster_spec={})
    assert isinstance(strategy, cd.MultiWorkerMirroredStrategy)
    options = strategy.extended._communication_options  # pylint: disable=protected-access
    assert options.implementation is tf.distribute.experimental.CommunicationImplementation.RING
    assert float(strategy.reduce("SUM", strategy.run(lambda: tf.constant(3.0)))) == 3.0
    assert str(raised.value) == (
        "tf.contrib.distribute.CollectiveAllReduceStrategy: num_gpus_per_worker must be an int "
        "from 0 (the CPU only) to the number of GPUs this process sees (0); got 2 (int). TF2 "
        "uses every GPU the process sees. Choose them with CUDA_VISIBLE_DEVICES or "
        "tf.config.set_visible_devices(...) before building the strategy."
    )
    assert str(unknown.value) == (
        "tf.contrib.distribute.CollectiveAllReduceStrategy(): got an unexpected keyword "
        "argument 'cluster_spec'. TF1's parameters: (num_gpus_per_worker=0, "
        "communication=None)."
    )


def test_mirrored_strategy_takes_tf1_keywords_where_tf2_does_the_same():
    with cd.installed():
        strategy = tf.contrib.distribute.MirroredStrategy(
            ["/cpu:0", "/cpu:1"],
            cross_tower_ops=tf.distribute.ReductionToOneDevice(),
        )
        with pytest.raises(ValueError, match="auto_shard_dataset cannot be mapped onto "
                           "tf.distribute.MirroredStrategy; got True"):
            tf.contrib.distribute.MirroredStrategy(auto_shard_dataset=True)
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 2
    assert isinstance(strategy.extended._cross_device_ops,  # pylint: disable=protected-access
                      tf.distribute.ReductionToOneDevice)


MIRRORED = next(r for r in _contrib.ROUTES if r.name == "MirroredStrategy")
COLLECTIVE = next(r for r in _contrib.ROUTES if r.name == "CollectiveAllReduceStrategy")
NO_COUNT = {"devices": None, "num_gpus": None, "num_gpus_per_worker": None}


# TF 1.15's contrib MirroredStrategy: num_gpus (or num_gpus_per_worker) N meant
# GPUs 0..N-1 and 0 the CPU alone, on a machine with GPUs too. No GPU here: the
# device lists are computed for a machine that sees two.
@pytest.mark.parametrize(
    "given, devices",
    [
        ({}, None),
        ({"devices": ["/cpu:0"]}, None),
        ({"num_gpus": 0}, ("/device:CPU:0",)),
        ({"num_gpus_per_worker": 0}, ("/device:CPU:0",)),
        ({"num_gpus": 1}, ("/device:GPU:0",)),
        ({"num_gpus_per_worker": 2}, ("/device:GPU:0", "/device:GPU:1")),
    ],
)
def test_mirrored_gpu_count_becomes_tf1s_device_list(given, devices):
    derived = _contrib._mirrored_devices(MIRRORED, NO_COUNT | given, 2)
    assert derived == ({} if devices is None else {"devices": devices})


@pytest.mark.parametrize(
    "given, text",
    [
        ({"num_gpus": 0, "num_gpus_per_worker": 0},
         "got both num_gpus and num_gpus_per_worker (the same count in TF1); pass only "
         "num_gpus."),
        ({"devices": ["/cpu:0"], "num_gpus": 0},
         "got both devices and num_gpus; pass only devices, or only num_gpus."),
        ({"num_gpus": 3},
         "num_gpus must be an int from 0 (the CPU only) to the number of GPUs this process "
         "sees (2); got 3 (int). TF2 uses every GPU the process sees. Choose them with "
         "CUDA_VISIBLE_DEVICES or tf.config.set_visible_devices(...) before building the "
         "strategy."),
        ({"num_gpus_per_worker": -1}, "num_gpus_per_worker must be an int from 0"),
        ({"num_gpus": True}, "num_gpus must be an int from 0"),
    ],
)
def test_mirrored_gpu_counts_tf1_refused_are_refused(given, text):
    with pytest.raises(ValueError) as raised:
        _contrib._mirrored_devices(MIRRORED, NO_COUNT | given, 2)
    assert str(raised.value).startswith("tf.contrib.distribute.MirroredStrategy: " + text)


CPU0 = ("/job:localhost/replica:0/task:0/device:CPU:0",)


def test_mirrored_num_gpus_0_builds_on_the_cpu_eager_and_in_a_graph():
    with cd.installed():
        eager = tf.contrib.distribute.MirroredStrategy(num_gpus=0)
        with tf.Graph().as_default():
            graph = tf.contrib.distribute.MirroredStrategy(num_gpus_per_worker=0)
        with pytest.raises(ValueError, match="got both devices and num_gpus;"):
            tf.contrib.distribute.MirroredStrategy(["/cpu:0"], num_gpus=0)
    assert eager.extended.worker_devices == CPU0
    assert graph.extended.worker_devices == ("/replica:0/task:0/device:CPU:0",)  # no job in a graph


@pytest.mark.parametrize("count, seen", [(0, 0), (2, 2)])
def test_collective_gpu_count_that_tf2_gives_is_taken(count, seen):
    assert _contrib._collective_gpus(COLLECTIVE, {"num_gpus_per_worker": count}, seen) == {}


def test_collective_default_0_on_a_machine_with_gpus_is_refused_naming_the_fix():
    # TF1's default meant the CPU only; TF2's strategy would take both GPUs.
    with pytest.raises(ValueError) as raised:
        _contrib._collective_gpus(COLLECTIVE, {"num_gpus_per_worker": 0}, 2)
    assert str(raised.value) == (
        "tf.contrib.distribute.CollectiveAllReduceStrategy: num_gpus_per_worker=0 (TF1's "
        "default is 0, the CPU only) cannot be honoured: TF2's strategy uses every GPU this "
        "process sees (2). Pass num_gpus_per_worker=2 to use them all; for the CPU only, hide "
        'the GPUs before building the strategy (CUDA_VISIBLE_DEVICES="" or '
        'tf.config.set_visible_devices([], "GPU")); or choose GPUs with CUDA_VISIBLE_DEVICES.'
    )


def test_cross_device_ops_and_its_tf1_alias_together_are_refused_before_building(monkeypatch):
    calls = []
    monkeypatch.setattr(tf.distribute, "MirroredStrategy", lambda **kw: calls.append(kw))
    with cd.installed():
        with pytest.raises(TypeError) as raised:
            tf.contrib.distribute.MirroredStrategy(
                cross_device_ops=tf.distribute.ReductionToOneDevice(),
                cross_tower_ops=tf.distribute.HierarchicalCopyAllReduce(),
            )
        tf.contrib.distribute.MirroredStrategy(cross_tower_ops="ops")
    assert str(raised.value) == (
        "tf.contrib.distribute.MirroredStrategy(): got both cross_device_ops and "
        "cross_tower_ops, two names of one argument; pass only cross_device_ops."
    )
    assert calls == [{"cross_device_ops": "ops"}]  # the refused call built nothing


def replica_id_sum(strategy):
    @tf.function
    def step():
        ctx = tf.distribute.get_replica_context()
        return tf.cast(ctx.replica_id_in_sync_group, tf.float32)

    return float(strategy.reduce("SUM", strategy.run(step), axis=None))


def test_tf1_tpu_colab_lines_run_eagerly_on_the_fake_tpu():
    with cd.installed(), fake_tpu("v3-8"):
        # As the TF 1.13-1.15 tensorflow/tpu Colabs wrote it:
        resolver = tf.contrib.cluster_resolver.TPUClusterResolver("grpc://127.0.0.1:8470")
        topology = tf.contrib.distribute.initialize_tpu_system(resolver)
        strategy = tf.contrib.distribute.TPUStrategy(resolver, steps_per_run=4)
        assert isinstance(resolver, tf.distribute.cluster_resolver.TPUClusterResolver)
        assert topology.num_tasks == 1 and topology.num_tpus_per_task == 8
        assert strategy.num_replicas_in_sync == 8
        assert strategy.extended.steps_per_run == 4
        assert replica_id_sum(strategy) == 28.0  # replica ids 0..7


GRAPH_PROGRAM = """
    import json
    import tensorflow as tf
    tf.compat.v1.disable_v2_behavior()
    import compat_distribute
    from compat_distribute.testing import fake_tpu

    compat_distribute.install()
    out = {}
    with fake_tpu("v3-8"):
        # TF 1.13-1.15 graph-mode TPU code, tf.contrib names as written then.
        resolver = tf.contrib.cluster_resolver.TPUClusterResolver(tpu="")
        tf.contrib.distribute.initialize_tpu_system(resolver)
        strategy = tf.contrib.distribute.TPUStrategy(resolver, steps_per_run=2)
        dataset = tf.data.Dataset.range(16).map(lambda x: tf.cast(x, tf.float32)).batch(8)
        with strategy.scope():
            iterator = strategy.make_dataset_iterator(dataset)
            sums = strategy.experimental_run(lambda x: tf.reduce_sum(x), iterator)
            total = strategy.reduce(tf.distribute.ReduceOp.SUM, sums)
        config = tf.compat.v1.ConfigProto()
        strategy.configure(session_config=config)
        with tf.compat.v1.Session(config=config) as sess:
            sess.run(iterator.initialize())
            out["tpu"] = [float(sess.run(total)), float(sess.run(total))]
        out["tpu_steps"] = strategy.extended.steps_per_run
    mwms = tf.contrib.distribute.CollectiveAllReduceStrategy(num_gpus_per_worker=0)
    with mwms.scope():
        doubled = mwms.experimental_local_results(mwms.run(lambda: tf.constant(2.0) * 3.0))
    with tf.compat.v1.Session() as sess:
        out["mwms"] = [float(v) for v in sess.run(doubled)]
    out["mwms_type"] = type(mwms).__name__
    compat_distribute.uninstall()
    out["contrib_after_uninstall"] = hasattr(tf, "contrib")
    print(json.dumps(out))
"""


def test_tf1_graph_program_with_contrib_names_runs_in_a_session(run_python):
    result = run_python(GRAPH_PROGRAM, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    # Batch 0..7 split over 8 replicas, then 8..15: one element per replica a step.
    assert out == {
        "tpu": [28.0, 92.0],
        "tpu_steps": 2,
        "mwms": [6.0],
        "mwms_type": "MultiWorkerMirroredStrategy",
        "contrib_after_uninstall": False,
    }
