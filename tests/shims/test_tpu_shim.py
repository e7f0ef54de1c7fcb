"""compat_distribute.TPUStrategy on the real-TPU backend.

No TPU is attached here, so the real backend is built from a stand-in
resolver that reports eight TPU cores. It only checks what reaches TF's own
`TPUStrategy` constructor and what the shim keeps; running on a real TPU is
verified by `compat-distribute smoke --tpu NAME` on a TPU VM.
"""

import pytest
import tensorflow as tf
from tensorflow.python.client import session as session_lib
from tensorflow.python.distribute import tpu_strategy as tf_tpu
from tensorflow.python.distribute.cluster_resolver import tpu_cluster_resolver
from tensorflow.python.tpu import tpu_system_metadata

import compat_distribute as cd


class StandInTPUResolver(tpu_cluster_resolver.TPUClusterResolver):
    """Reports an 8-core, one-host TPU without contacting one (hardware stand-in)."""

    def __init__(self):  # pylint: disable=super-init-not-called
        self.task_type = "worker"
        self.task_id = 0
        self.rpc_layer = None
        self._environment = ""

    def get_tpu_system_metadata(self):
        devices = [
            session_lib._DeviceAttributes(  # pylint: disable=protected-access
                f"/job:worker/replica:0/task:0/device:TPU:{i}", "TPU", 0, 0
            )
            for i in range(8)
        ]
        return tpu_system_metadata.TPUSystemMetadata(
            num_cores=8, num_hosts=1, num_of_cores_per_host=8, topology=None, devices=devices
        )


@pytest.fixture(name="tf_init_calls")
def tf_init_calls_fixture(monkeypatch):
    """Records the arguments that reach TF's TPUStrategy constructor."""
    calls = []
    original = tf_tpu.TPUStrategyV2.__init__

    def spy(self, *args, **kwargs):
        calls.append((args, kwargs))
        original(self, *args, **kwargs)

    monkeypatch.setattr(tf_tpu.TPUStrategyV2, "__init__", spy)
    return calls


def test_real_backend_is_a_tf2_tpu_strategy_with_v1_steps_per_run(tf_init_calls):
    resolver = StandInTPUResolver()
    strategy = cd.TPUStrategy(resolver, steps_per_run=4)
    assert isinstance(strategy, tf.distribute.TPUStrategy)
    assert isinstance(strategy, cd.TPUStrategy)
    assert tf_init_calls == [((resolver,), {"experimental_device_assignment": None})]
    assert strategy.extended.steps_per_run == 4
    assert strategy.steps_per_run == 4
    assert strategy.num_replicas_in_sync == 8
    assert strategy.cluster_resolver is resolver


def test_real_backend_defaults_steps_per_run_to_one(tf_init_calls):
    strategy = cd.TPUStrategy(StandInTPUResolver())
    assert strategy.extended.steps_per_run == 1
    assert tf_init_calls[0][1] == {"experimental_device_assignment": None}


def four_replica_assignment():
    """4 replicas of 2 cores on the stand-in's 8 cores."""
    topology = tf.tpu.experimental.Topology(
        mesh_shape=[2, 2, 1, 2],
        device_coordinates=[[[x, y, 0, c] for x in range(2) for y in range(2) for c in range(2)]],
    )
    return tf.tpu.experimental.DeviceAssignment.build(
        topology, computation_shape=[1, 1, 1, 2], num_replicas=4
    )


def test_real_backend_passes_device_assignment_through(tf_init_calls):
    assignment = four_replica_assignment()
    strategy = cd.TPUStrategy(StandInTPUResolver(), device_assignment=assignment)
    assert tf_init_calls[0][1] == {"experimental_device_assignment": assignment}
    assert strategy.num_replicas_in_sync == 4


def test_real_backend_serves_v1_members_from_the_table():
    strategy = cd.TPUStrategy(StandInTPUResolver(), steps_per_run=2)
    with pytest.warns(DeprecationWarning, match=r"^experimental_run_v2 is deprecated; use run"):
        assert strategy.experimental_run_v2 == strategy.run
    with pytest.raises(AttributeError, match="experimental_make_numpy_iterator was removed"):
        strategy.experimental_make_numpy_iterator  # pylint: disable=pointless-statement


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (
            {"steps_per_run": 0},
            ValueError,
            "steps_per_run must be a positive int (>= 1); got 0 (int)",
        ),
        ({"steps_per_run": -3}, ValueError, "got -3 (int)"),
        (
            {"steps_per_run": 2.5},
            TypeError,
            "steps_per_run must be a positive int; got 2.5 (float)",
        ),
        ({"steps_per_run": True}, TypeError, "got True (bool)"),
        (
            {"steps_per_run": 2**31},
            ValueError,
            "steps_per_run must be at most 2147483647 (TF1 counted the steps of an "
            "on-device loop in an int32); got 2147483648. Pass None or 1",
        ),
        ({"steps_per_run": "4"}, TypeError, "got '4' (str)"),
        ({"device_assignment": "0"}, TypeError, "device_assignment must be None or a tf.tpu."),
        ({"device_assignment": [0, 1]}, TypeError, "got [0, 1] (list)"),
    ],
)
def test_bad_arguments_are_refused_before_tf_is_touched(tf_init_calls, kwargs, error, text):
    with pytest.raises(error) as info:
        cd.TPUStrategy(StandInTPUResolver(), **kwargs)
    assert text in str(info.value)
    assert tf_init_calls == []


def test_a_resolver_of_the_wrong_kind_is_refused(tf_init_calls):
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}))
    with pytest.raises(
        TypeError, match="tpu_cluster_resolver must be a TPU resolver; got a SimpleClusterResolver"
    ):
        cd.TPUStrategy(resolver)
    with pytest.raises(TypeError) as info:
        cd.TPUStrategy("local")
    assert str(info.value) == (
        "tpu_cluster_resolver must be None or a tf.distribute.cluster_resolver.ClusterResolver; "
        "got 'local' (str). Pass tf.distribute.cluster_resolver.TPUClusterResolver(tpu=...) for "
        "a real TPU, or compat_distribute.testing.FakeTPUClusterResolver() to run on virtual "
        "CPU devices."
    )
    assert tf_init_calls == []


def test_a_device_assignment_passed_second_is_taken_as_one(tf_init_calls):
    # TF 2.0-2.2's tf.distribute.experimental.TPUStrategy(resolver, device_assignment),
    # which install() routes to this class.
    assignment = four_replica_assignment()
    strategy = cd.TPUStrategy(StandInTPUResolver(), assignment)
    assert tf_init_calls[0][1] == {"experimental_device_assignment": assignment}
    assert strategy.extended.steps_per_run == 1
    # Passed twice, second and by name: named as such (it used to blame steps_per_run).
    for again in ({"device_assignment": assignment}, {"device_assignment": "0"}):
        with pytest.raises(TypeError) as info:
            cd.TPUStrategy(StandInTPUResolver(), assignment, **again)
        assert str(info.value) == (
            "TPUStrategy() got multiple values for argument 'device_assignment': a "
            "DeviceAssignment second (where TF1 takes steps_per_run, and TF 2.0-2.2 took the "
            f"assignment) and device_assignment={again['device_assignment']!r} "
            f"({type(again['device_assignment']).__name__}). Pass it once: "
            "TPUStrategy(resolver, steps_per_run=N, device_assignment=...)."
        )
    assert len(tf_init_calls) == 1


def test_tf_1_12s_num_cores_is_refused_naming_device_assignment_before_anything_starts(tf_init_calls):
    # TF 1.12's contrib signature: TPUStrategy(tpu_cluster_resolver, steps_per_run, num_cores).
    for build in (cd.TPUStrategy, lambda *a, **k: tf.contrib.distribute.TPUStrategy(*a, **k)):
        with cd.installed(), pytest.raises(TypeError) as info:
            build(StandInTPUResolver(), steps_per_run=2, num_cores=8)
        assert str(info.value) == (
            "TPUStrategy(): num_cores=8 (int) is TF 1.12's argument, which TF 1.13 replaced "
            "with device_assignment. Drop it to use every core of the TPU (what "
            "num_cores=None did), or pass device_assignment=tf.tpu.experimental."
            "DeviceAssignment.build(topology, num_replicas=N) to use N."
        )
    assert tf_init_calls == []
    # None, TF 1.12's default, is what TF 1.13 does.
    assert cd.TPUStrategy(StandInTPUResolver(), steps_per_run=2, num_cores=None).extended.steps_per_run == 2


def test_tf1s_class_bound_before_install_builds_the_shim(tf_init_calls):
    # `from tensorflow.compat.v1.distribute.experimental import TPUStrategy` above
    # install() binds TensorFlow's own class, which install() cannot re-route.
    bound = tf.compat.v1.distribute.experimental.TPUStrategy
    with cd.installed():
        strategy = bound(StandInTPUResolver(), steps_per_run=4)
    assert isinstance(strategy, cd.TPUStrategy)
    assert strategy.extended.steps_per_run == 4
    assert len(tf_init_calls) == 1
    assert type(bound(StandInTPUResolver(), steps_per_run=4)) is bound  # uninstalled


def test_real_backend_experimental_run_sends_a_tf_function_to_run_in_eager_mode(monkeypatch):
    """TF2 routes `experimental_run` to `run`, which a TPU takes eagerly for a tf.function."""
    strategy = cd.TPUStrategy(StandInTPUResolver())
    calls = []
    # No TPU here: record what reaches the TPU's run instead of running it.
    monkeypatch.setattr(strategy, "run", lambda fn, args=(): calls.append((fn, args)) or "ran")
    step = tf.function(lambda: tf.constant(1.0))
    assert strategy.experimental_run(step) == "ran"
    assert calls == [(step, ())]

    class Model:
        @tf.function
        def __call__(self):
            return tf.constant(2.0)

    model = Model()
    assert strategy.experimental_run(model) == "ran"
    assert calls[-1] == (model, ())
    with pytest.raises(NotImplementedError) as info:
        strategy.experimental_run(lambda: tf.constant(1.0))
    assert str(info.value).startswith(
        "Eager mode not supported in TPUStrategy outside TF functions. Call "
        "strategy.experimental_run(fn, iterator) inside a function decorated with @tf.function"
    )
    assert len(calls) == 2
