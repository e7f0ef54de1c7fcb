"""fake_tpu(): routing TensorFlow's TPU entry points, and TF's docstring examples verbatim."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute import _patching
from compat_distribute.testing import FakeTPU
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import FakeTPUStrategy
from compat_distribute.testing import fake_tpu

from fake_tpu_helpers import CPU


def patched_names():
    return {
        (path, name): getattr(_patching.tf_object(path), name)
        for path, name, _ in fake_tpu()._routes()  # pylint: disable=protected-access
    }


def test_fake_tpu_routes_tensorflow_and_restores_it_exactly():
    before = patched_names()
    fake = fake_tpu("v4-8")
    with fake:
        assert fake.active
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu="my-tpu", zone="us-central1-b"
        )
        assert isinstance(resolver, FakeTPUClusterResolver)
        assert isinstance(resolver, tf.distribute.cluster_resolver.TPUClusterResolver)
        assert resolver.num_accelerators() == {"TPU": 4}
        assert tf.config.experimental_connect_to_cluster(resolver) is None
        topology = tf.tpu.experimental.initialize_tpu_system(resolver)
        assert topology.mesh_shape.tolist() == [2, 2, 1, 1]
        strategy = tf.distribute.TPUStrategy(resolver)
        assert isinstance(strategy, tf.distribute.TPUStrategy)
        assert strategy.num_replicas_in_sync == 4
        assert tf.distribute.TPUStrategy().num_replicas_in_sync == 4  # default resolver
        old = tf.distribute.experimental.TPUStrategy(resolver, device_assignment=None)
        assert old.num_replicas_in_sync == 4
        v1 = tf.compat.v1.distribute.experimental.TPUStrategy(resolver, steps_per_run=3)
        assert isinstance(v1, tf.compat.v1.distribute.experimental.TPUStrategy)
        # As in TensorFlow, a strategy built by another name is not one of V1's.
        assert not isinstance(strategy, tf.compat.v1.distribute.experimental.TPUStrategy)
        assert v1.extended.steps_per_run == 3
        tf.tpu.experimental.shutdown_tpu_system(resolver)
        assert before != patched_names()
    assert not fake.active
    after = patched_names()
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)


def test_names_bound_before_fake_tpu_run_on_the_fake():
    # Bound before the fake started, TensorFlow's own objects: the resolver used to
    # reach the network (URLError), initialize_tpu_system to fail with a bare
    # AssertionError, the strategies with "IndexError: index 0 is out of bounds".
    resolver_class = tf.distribute.cluster_resolver.TPUClusterResolver
    initialize = tf.tpu.experimental.initialize_tpu_system
    v2 = tf.distribute.TPUStrategy
    v1 = tf.compat.v1.distribute.experimental.TPUStrategy
    with fake_tpu("v4-8"):
        resolver = resolver_class(tpu="my-tpu")
        assert isinstance(resolver, FakeTPUClusterResolver)
        assert initialize(resolver).mesh_shape.tolist() == [2, 2, 1, 1]
        assert isinstance(v2(resolver), FakeTPUStrategy)
        assert v2().num_replicas_in_sync == 4  # the fake's default resolver
        strategy = v1(resolver, steps_per_run=3)
        assert (strategy.num_replicas_in_sync, strategy.extended.steps_per_run) == (4, 3)
    assert tf.distribute.cluster_resolver.TPUClusterResolver is resolver_class
    # TensorFlow's class builds its own again, arguments and all.
    assert type(resolver_class(tpu="local")) is resolver_class


def test_tensorflows_own_tpu_calls_take_a_fake_resolver_outside_fake_tpu():
    resolver = FakeTPUClusterResolver("v4-8")
    # docs/fake-tpu.md's call: it used to be a bare AssertionError.
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    assert topology.mesh_shape.tolist() == [2, 2, 1, 1]
    assert isinstance(tf.distribute.TPUStrategy(resolver), FakeTPUStrategy)
    old = tf.distribute.experimental.TPUStrategy(resolver, device_assignment=None)
    assert old.num_replicas_in_sync == 4
    v1 = tf.compat.v1.distribute.experimental.TPUStrategy(resolver, steps_per_run=2)
    assert v1.extended.steps_per_run == 2
    tf.tpu.experimental.shutdown_tpu_system(resolver)
    # Any other resolver gets TensorFlow's own call, with its own (bare) error.
    other = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}))
    with pytest.raises(AssertionError):
        tf.tpu.experimental.initialize_tpu_system(other)


def test_fake_tpu_start_stop_and_nesting():
    outer = fake_tpu("v3-8").start()
    try:
        assert isinstance(outer, FakeTPU)
        with fake_tpu("v4-8"):
            assert tf.distribute.cluster_resolver.TPUClusterResolver().num_accelerators() == {
                "TPU": 4
            }
        assert tf.distribute.cluster_resolver.TPUClusterResolver().num_accelerators() == {"TPU": 8}
    finally:
        outer.stop()
    assert (
        tf.distribute.cluster_resolver.TPUClusterResolver is not outer._resolver_class
    )  # pylint: disable=protected-access


def test_tpu_strategy_docstring_split_example_runs_verbatim():
    # `inputs` and `model` are what the example leaves to the reader.
    inputs = tf.data.Dataset.from_tensors(tf.reshape(tf.range(192.0), [2, 4, 8, 3])).repeat()

    def model(x):
        return tf.reduce_sum(x, axis=[1, 2, 3])

    with fake_tpu(mesh_shape=[1, 2, 2, 2]):
        # From TPUStrategyV2.experimental_split_to_logical_devices, verbatim:
        # Initializing TPU system with 8 logical devices and 1 replica.
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
        tf.config.experimental_connect_to_cluster(resolver)
        topology = tf.tpu.experimental.initialize_tpu_system(resolver)
        device_assignment = tf.tpu.experimental.DeviceAssignment.build(
            topology, computation_shape=[1, 2, 2, 2], num_replicas=1
        )
        # Construct the TPUStrategy. Since we are going to split the image across
        # logical devices, here we set `experimental_spmd_xla_partitioning=True`
        # so that the partitioning can be compiled in SPMD mode, which usually
        # results in faster compilation and smaller HBM requirement if the size of
        # input and activation tensors are much bigger than that of the model
        # parameters. Note that this flag is suggested but not a hard requirement
        # for `experimental_split_to_logical_devices`.
        strategy = tf.distribute.TPUStrategy(
            resolver,
            experimental_device_assignment=device_assignment,
            experimental_spmd_xla_partitioning=True,
        )

        iterator = iter(inputs)

        @tf.function()
        def step_fn(inputs):
            inputs = strategy.experimental_split_to_logical_devices(inputs, [1, 2, 4, 1])

            # model() function will be executed on 8 logical devices with `inputs`
            # split 2 * 4  ways.
            output = model(inputs)
            return output

        result = strategy.run(step_fn, args=(next(iterator),))
        # (end of the example)
        assert strategy.num_replicas_in_sync == 1
    per_image = np.arange(192.0).reshape(2, 96).sum(axis=1)
    assert np.asarray(result).tolist() == per_image.tolist()


def test_tpu_strategy_class_docstring_keras_example_runs_verbatim():
    # Seeded: with some draws of data and kernel, every gradient is clipped to 0.
    tf.keras.utils.set_random_seed(1)
    with fake_tpu("v3-8"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras on input_shape=
        # From TPUStrategyV2's docstring, verbatim:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)

        with strategy.scope():
            model = tf.keras.Sequential(
                [
                    tf.keras.layers.Dense(2, input_shape=(5,)),
                ]
            )
            optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)

        def dataset_fn(ctx):
            x = np.random.random((2, 5)).astype(np.float32)
            y = np.random.randint(2, size=(2, 1))
            dataset = tf.data.Dataset.from_tensor_slices((x, y))
            return dataset.repeat().batch(1, drop_remainder=True)

        dist_dataset = strategy.distribute_datasets_from_function(dataset_fn)
        iterator = iter(dist_dataset)

        @tf.function()
        def train_step(iterator):

            def step_fn(inputs):
                features, labels = inputs
                with tf.GradientTape() as tape:
                    logits = model(features, training=True)
                    loss = tf.keras.losses.sparse_categorical_crossentropy(labels, logits)

                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))

            strategy.run(step_fn, args=(next(iterator),))

        weights = model.trainable_variables[0].numpy()
        train_step(iterator)
        # (end of the first part)
        assert int(optimizer.iterations.numpy()) == 1
        assert not np.allclose(weights, model.trainable_variables[0].numpy())
        # Mirrored: every replica holds the same updated weights.
        kernel = model.trainable_variables[0]
        if not isinstance(kernel, tf.Variable):  # Keras 3 wraps the distributed variable
            kernel = kernel.value
        copies = [v.numpy() for v in kernel.values]
        assert len(copies) == 8 and all(np.array_equal(copies[0], c) for c in copies)


def test_sixteen_core_mesh_in_a_fresh_process(run_python):
    result = run_python("""
        import tensorflow as tf
        from compat_distribute.testing import fake_tpu

        with fake_tpu(mesh_shape=(2, 2, 2, 2)):
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
            topology = tf.tpu.experimental.initialize_tpu_system(resolver)
            strategy = tf.distribute.TPUStrategy(resolver)

            @tf.function
            def step():
                ctx = tf.distribute.get_replica_context()
                return strategy.run(
                    lambda: tf.distribute.get_replica_context().all_reduce(
                        "SUM", tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)))

            sums = strategy.experimental_local_results(step())
            assignment = tf.tpu.experimental.DeviceAssignment.build(
                topology, computation_shape=[1, 1, 2, 2], num_replicas=4)
            split = tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)
            print(resolver.num_accelerators()["TPU"], strategy.num_replicas_in_sync,
                  sorted({float(s) for s in sums}), len(tf.config.list_logical_devices("CPU")),
                  split.num_replicas_in_sync, split.extended.num_replicas_per_host)
        """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "16 16 [120.0] 16 4 4"


def test_tensorflow_run_first_inside_the_fake_sees_its_cores(run_python):
    # A one-device baseline computed first inside fake_tpu() started the
    # runtime with 1 CPU, and the resolver built next failed "came too late".
    result = run_python("""
        import tensorflow as tf
        from compat_distribute.testing import fake_tpu

        with fake_tpu("v3-8"):
            one = tf.distribute.OneDeviceStrategy("/cpu:0")
            baseline = float(one.reduce("SUM", one.run(lambda: tf.constant(2.0)), axis=None))
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
            strategy = tf.distribute.TPUStrategy(resolver)
            total = strategy.reduce("SUM", strategy.run(tf.function(lambda: tf.constant(2.0))), axis=None)
            print(baseline, float(total), len(tf.config.list_logical_devices("CPU")))
        """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "2.0 16.0 8"


def test_a_fake_with_more_cores_than_the_started_runtime_fails_on_entry_routing_nothing():
    assert len(tf.config.list_logical_devices("CPU")) == 8  # starts the runtime
    before = patched_names()
    fake = fake_tpu(mesh_shape=(2, 2, 2, 2))
    with pytest.raises(RuntimeError) as info:
        fake.start()
    assert str(info.value).startswith(
        "set_virtual_devices(16, 'CPU') came too late: TensorFlow's runtime is already "
        "initialised with 8 logical CPU device(s)"
    )
    assert str(info.value).endswith(
        "fake_tpu() and FakeTPUClusterResolver call it for their cores: enter or build them "
        "before other TensorFlow code."
    )
    assert not fake.active and patched_names() == before


def test_tf1_set_up_without_a_resolver_builds_the_fake():
    """TF1 defaulted to TPUClusterResolver(""): `compat_distribute.TPUStrategy()` in fake_tpu()."""
    with fake_tpu("v4-8"):
        strategy = compat_distribute.TPUStrategy(steps_per_run=2)
        assert isinstance(strategy, FakeTPUStrategy)
        assert strategy.num_replicas_in_sync == 4
        assert strategy.extended.steps_per_run == 2
        assert strategy.cluster_resolver.topology_name == "v4-8"


def test_tf2_0_set_up_connects_to_the_fake_resolvers_master():
    """TF 2.0-2.2 wrote `experimental_connect_to_host(resolver.master())`; the fake is local."""
    with fake_tpu("v4-8"):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="my-tpu")
        assert resolver.master() == "grpc://127.0.0.1:8470"  # a Cloud TPU's, never dialled
        assert tf.config.experimental_connect_to_host(resolver.master()) is None
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.experimental.TPUStrategy(resolver)
        assert strategy.num_replicas_in_sync == 4
    # Outside the fake, TensorFlow's own function is back, with its error.
    with pytest.raises(ValueError, match="Must provide at least one remote_host"):
        tf.config.experimental_connect_to_host("")


def test_tpu_strategy_without_a_resolver_outside_the_fake_is_tensorflows():
    """Outside fake_tpu() no resolver means TF's own TPUClusterResolver(""), which needs a TPU."""
    with pytest.raises((ValueError, RuntimeError, tf.errors.NotFoundError)):
        compat_distribute.TPUStrategy()


def test_a_tf1_session_built_with_the_configured_config_sees_every_core(run_python):
    # TF1 TPU programs build their Session with the config strategy.configure()
    # updated. A Session takes its devices from that config alone: without the
    # fake's CPU count it had one CPU, and placing replica 1's ops failed
    # ("Cannot assign a device ... CPU:1"), or with soft placement every replica
    # silently ran on CPU:0.
    result = run_python("""
        import tensorflow as tf
        tf.compat.v1.disable_v2_behavior()
        import compat_distribute
        from compat_distribute.testing import fake_tpu

        compat_distribute.install()
        with fake_tpu("v4-8"):
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
            strategy = tf.compat.v1.distribute.experimental.TPUStrategy(resolver)
            dataset = tf.compat.v1.data.Dataset.range(8).map(
                lambda x: tf.cast(x, tf.float32)).batch(8)
            with strategy.scope():
                iterator = strategy.make_dataset_iterator(dataset)
                sums = strategy.experimental_run(
                    lambda x: (tf.reduce_sum(x), tf.constant(0.0)), iterator)
            config = tf.compat.v1.ConfigProto()
            strategy.configure(session_config=config)
            print(config.device_count["CPU"], config.isolate_session_state)
            with tf.compat.v1.Session(config=config) as sess:
                sess.run(iterator.initializer)
                devices = [d.device_type for d in sess.list_devices()]
                values = sess.run(strategy.experimental_local_results(sums[0]))
                print(devices.count("CPU"), [float(v) for v in values])
                print([t.device[-5:] for t in strategy.experimental_local_results(sums[0])])
            # A session with its own config, not configure()'s: the same count.
            one_cpu = tf.compat.v1.ConfigProto(device_count={"CPU": 1})
            with tf.compat.v1.Session(config=one_cpu) as sess:
                print([d.device_type for d in sess.list_devices()].count("CPU"))
        """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-5:] == [
        "4 True",
        "4 [1.0, 5.0, 9.0, 13.0]",
        "['CPU:0', 'CPU:1', 'CPU:2', 'CPU:3']",
        "4",
        "",
    ]


def _replica_id_is_static(strategy):
    @tf.function
    def step():
        replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
        return tf.constant(tf.get_static_value(replica_id) is not None)

    return [bool(v) for v in strategy.experimental_local_results(strategy.run(step))]


def test_set_trace_mode_sets_one_strategys_mode():
    from compat_distribute.testing._fake_tpu.replicate import set_trace_mode

    once = FakeTPUStrategy(FakeTPUClusterResolver("v2-8"))
    per_replica = FakeTPUStrategy(FakeTPUClusterResolver("v2-8"))
    set_trace_mode(per_replica, "per_replica")
    # One trace for all cores: the replica id is a tensor; one per replica: a constant.
    assert _replica_id_is_static(once) == [False] * 8
    assert _replica_id_is_static(per_replica) == [True] * 8
    with pytest.raises(ValueError, match=r"mode must be one of \('per_replica', 'once'\)"):
        set_trace_mode(once, "each")
