"""compat_distribute.MultiWorkerMirroredStrategy in one process (one worker)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import warnings

import pytest
import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy as tf_collective

import compat_distribute as cd
from compat_distribute import _cluster_wait
from compat_distribute.testing import deadlines


@pytest.fixture(scope="module", name="strategy")
def strategy_fixture():
    return cd.MultiWorkerMirroredStrategy(communication=cd.CollectiveCommunication.RING)


def test_it_is_a_tf2_strategy_built_with_communication_options(strategy):
    assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    assert not isinstance(
        strategy, tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy
    )
    options = strategy.extended._communication_options  # pylint: disable=protected-access
    assert options.implementation is tf.distribute.experimental.CommunicationImplementation.RING
    assert strategy.num_replicas_in_sync == 1
    assert strategy.extended.should_checkpoint


def test_collective_communication_is_tfs_own_enum():
    assert cd.CollectiveCommunication is tf.distribute.experimental.CollectiveCommunication
    assert (
        cd.CollectiveCommunication.AUTO
        is tf.distribute.experimental.CommunicationImplementation.AUTO
    )


def test_the_resolver_is_taken_by_keyword():
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({}), task_type="worker", task_id=0
    )
    strategy = cd.MultiWorkerMirroredStrategy(cd.CollectiveCommunication.AUTO, resolver)
    assert strategy.cluster_resolver is resolver


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (
            {"communication": "RING"},
            TypeError,
            "got the string 'RING'. Pass communication=CollectiveCommunication.RING",
        ),
        (
            {"communication": 3},
            ValueError,
            "communication must be one of CollectiveCommunication.AUTO, CollectiveCommunication.RING, CollectiveCommunication.NCCL; got 3 (int)",
        ),
        ({"communication": None}, ValueError, "got None (NoneType)"),
        (
            {"cluster_resolver": "grpc://localhost:1"},
            TypeError,
            "cluster_resolver must be None or a tf.distribute.cluster_resolver.ClusterResolver; "
            "got 'grpc://localhost:1' (str). Pass None or "
            "tf.distribute.cluster_resolver.TFConfigClusterResolver() to read TF_CONFIG, or a "
            "SimpleClusterResolver of a tf.train.ClusterSpec.",
        ),
    ],
)
def test_bad_arguments_are_refused_before_tf_is_touched(monkeypatch, kwargs, error, text):
    calls = []
    monkeypatch.setattr(
        tf_collective.CollectiveAllReduceStrategy, "__init__", lambda *a, **k: calls.append(a)
    )
    with pytest.raises(error) as info:
        cd.MultiWorkerMirroredStrategy(**kwargs)
    assert text in str(info.value)
    assert calls == []


def test_communication_options_object_is_refused_with_advice():
    options = tf.distribute.experimental.CommunicationOptions()
    with pytest.raises(
        TypeError, match="got a CommunicationOptions object.*communication_options=...\\) directly"
    ):
        cd.MultiWorkerMirroredStrategy(communication=options)


def test_a_tpu_resolver_is_refused():
    from tests.shims.test_tpu_shim import StandInTPUResolver

    with pytest.raises(
        TypeError,
        match="cluster_resolver must describe a multi-worker cluster .* got the TPU resolver StandInTPUResolver",
    ):
        cd.MultiWorkerMirroredStrategy(cluster_resolver=StandInTPUResolver())


def test_run_steps_runs_steps_in_one_call(strategy):
    with strategy.scope():
        counter = tf.Variable(0)
    iterator = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.range(10).batch(1)))

    def step(x):
        counter.assign_add(1)
        return x * 2

    assert strategy.run_steps(step, iterator, steps=3).numpy().tolist() == [4]
    assert int(counter.numpy()) == 3
    # steps defaults to steps_per_run, which a multi-worker strategy does not have: 1.
    assert strategy.run_steps(step, iterator).numpy().tolist() == [6]
    assert int(counter.numpy()) == 4
    assert int(next(iterator)[0]) == 4  # exactly four batches were consumed
    with pytest.raises(ValueError, match=r"steps must be a positive int \(>= 1\); got 0 \(int\)"):
        strategy.run_steps(step, iterator, steps=0)


# Differential: the shim against TF's own tf.compat.v1 strategy, same inputs.


@pytest.fixture(scope="module", name="tf1_strategy")
def tf1_strategy_fixture():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy()


def both(strategy, tf1_strategy, fn):
    return fn(strategy), fn(tf1_strategy)


def test_same_run_and_reduce_as_tf1(strategy, tf1_strategy):
    def fn(s):
        out = s.run(lambda x: x * 3.0, args=(tf.constant([1.0, 2.0]),))
        return s.reduce("SUM", out).numpy().tolist(), s.reduce("MEAN", out, axis=0).numpy().tolist()

    ours, theirs = both(strategy, tf1_strategy, fn)
    assert ours == theirs == ([3.0, 6.0], 4.5)


def test_same_all_reduce_in_replica_context_as_tf1(strategy, tf1_strategy):
    def fn(s):
        @tf.function
        def step():
            def replica_fn():
                ctx = tf.distribute.get_replica_context()
                return ctx.all_reduce("SUM", tf.cast(ctx.replica_id_in_sync_group + 5, tf.float32))

            return s.experimental_local_results(s.run(replica_fn))

        return [float(v) for v in step()]

    ours, theirs = both(strategy, tf1_strategy, fn)
    assert ours == theirs == [5.0]


def test_same_datasets_as_tf1(strategy, tf1_strategy):
    def fn(s):
        dist = s.experimental_distribute_dataset(tf.data.Dataset.range(6).batch(2))
        iterator = s.make_dataset_iterator(tf.data.Dataset.range(4).batch(2))
        iterator.initialize()
        return [b.numpy().tolist() for b in dist], iterator.get_next().numpy().tolist()

    ours, theirs = both(strategy, tf1_strategy, fn)
    assert ours == theirs == ([[0, 1], [2, 3], [4, 5]], [0, 1])


def test_same_exception_types_as_tf1(strategy, tf1_strategy):
    def fn(s):
        kinds = []
        for call in (
            lambda: s.reduce("MAX", tf.constant(1.0)),  # not a ReduceOp name
            lambda: s.reduce(tf.distribute.ReduceOp.SUM, tf.constant([1.0]), axis=3),
            lambda: s.make_input_fn_iterator(lambda ctx: None, replication_mode="PER_REPLICA"),
            lambda: s.experimental_distribute_dataset([1, 2, 3]),
        ):
            try:
                call()
                kinds.append(None)
            except Exception as e:  # pylint: disable=broad-except
                kinds.append(type(e))
        return kinds

    ours, theirs = both(strategy, tf1_strategy, fn)
    assert ours == theirs
    assert ours[2] is ValueError


@pytest.mark.parametrize(
    "reduce_op, error, text",
    [
        # TF's texts were "'SUMM' is not a valid ReduceOp" and an empty AssertionError.
        (
            "SUMM",
            ValueError,
            "reduce_op must be tf.distribute.ReduceOp.SUM or MEAN (or 'SUM' / 'MEAN'); got "
            "'SUMM'.",
        ),
        (
            None,
            AssertionError,
            "reduce_op must be tf.distribute.ReduceOp.SUM or MEAN (or 'SUM' / 'MEAN'); got "
            "None. TensorFlow's reduce_to asserts the same (with no message).",
        ),
        (3, AssertionError, "got 3. TensorFlow's reduce_to asserts the same"),
    ],
)
def test_reduce_says_which_reduce_ops_it_takes(strategy, reduce_op, error, text):
    with pytest.raises(error) as info:
        strategy.reduce(reduce_op, tf.constant(1.0))
    assert text in str(info.value)
    assert strategy.reduce("mean", tf.constant(2.0)).numpy() == 2.0


# TF_CONFIG is checked with the project's parser before anything starts.


@pytest.mark.parametrize(
    "tf_config, text",
    [
        (
            '{"cluster": {"worker": ["localhost:12345"]}',
            "TF_CONFIG is not valid JSON: Expecting ',' delimiter at line 1 column 44 (char 43)",
        ),
        (
            '{"clusterz": {"worker": ["localhost:12345"]}}',
            "TF_CONFIG['clusterz'] is not a TF_CONFIG key; the keys are cluster, task, rpc_layer",
        ),
        (
            '{"cluster": {"worker": ["localhost:12345"]}, "task": {"type": "worker", "index": 3}}',
            "TF_CONFIG['task']['index'] must be an int in 0..0 (job 'worker' has 1 task(s)); got 3 (int)",
        ),
        (
            '{"cluster": {"worker": ["localhost"]}}',
            "TF_CONFIG['cluster']['worker'][0] must be a 'host:port' string",
        ),
        # TensorFlow's own resolver raises a bare JSONDecodeError on these.
        (
            "",
            "TF_CONFIG is set but empty (''); it must hold a JSON object such as "
            '{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type": "worker", '
            '"index": 0}}. Set it so, or unset it (e.g. `unset TF_CONFIG`, or '
            "del os.environ['TF_CONFIG']) to run one worker on its own.",
        ),
        (" \n ", "TF_CONFIG is set but empty (' \\n '); it must hold a JSON object such as"),
        # TensorFlow takes these and then waits, or binds a port twice.
        (
            '{"cluster": {"worker": ["localhost:1", "localhost:1"]}}',
            "TF_CONFIG['cluster']['worker'][1] is 'localhost:1', the address of "
            "TF_CONFIG['cluster']['worker'][0] too; each task needs an address of its own",
        ),
        (
            '{"cluster": {"chief": ["localhost:1", "localhost:2"]}}',
            "TF_CONFIG['cluster']['chief'] must hold one address: a cluster has one chief at most; "
            "got 2 ('localhost:1', 'localhost:2'). Name the others' job 'worker'.",
        ),
        (
            '{"cluster": {"worker": ["localhost:1"]}, "rpc_layer": "http"}',
            "TF_CONFIG['rpc_layer'] must be 'grpc', the RPC layer TensorFlow's servers speak; got "
            "'http'. Write \"rpc_layer\": \"grpc\", or leave it out.",
        ),
    ],
)
def test_a_bad_tf_config_is_refused_before_tf_is_touched(monkeypatch, tf_config, text):
    calls = []
    monkeypatch.setattr(
        tf_collective.CollectiveAllReduceStrategy, "__init__", lambda *a, **k: calls.append(a)
    )
    monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(ValueError) as info:
        cd.MultiWorkerMirroredStrategy()
    assert text in str(info.value)
    with pytest.raises(ValueError, match=r"^TF_CONFIG"):
        cd.MultiWorkerMirroredStrategy(
            cluster_resolver=tf.distribute.cluster_resolver.TFConfigClusterResolver()
        )
    assert calls == []


def test_tf_config_is_not_read_for_another_resolver(monkeypatch):
    class Reached(Exception):
        pass

    def tf_init(self, **kwargs):
        raise Reached(kwargs["cluster_resolver"])

    monkeypatch.setattr(tf_collective.CollectiveAllReduceStrategy, "__init__", tf_init)
    monkeypatch.setenv("TF_CONFIG", "{not json")
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}))
    with pytest.raises(Reached) as info:
        cd.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    assert info.value.args == (resolver,)


# A task of the TF_CONFIG cluster that never starts: TensorFlow waits up to an
# hour, holding the interpreter, and says so only in INFO logs.

_ONE_OF_TWO_WORKERS = """
import time
from compat_distribute import _cluster_wait
_cluster_wait.WARN_AFTER_S = 2
import compat_distribute as cd
print("building", flush=True)
cd.MultiWorkerMirroredStrategy()
print("built", flush=True)
"""


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.multi_worker
def test_a_peer_that_never_starts_is_named_and_the_deadline_ends_the_wait(run_python):
    ports = _free_ports(2)
    tf_config = (
        '{"cluster": {"worker": ["127.0.0.1:%d", "127.0.0.1:%d"]}, '
        '"task": {"type": "worker", "index": 0}}' % tuple(ports)
    )
    result = run_python(
        _ONE_OF_TWO_WORKERS,
        timeout=120,
        env={"TF_CONFIG": tf_config, _cluster_wait.DEADLINE_ENV: "4"},
    )
    _assert_named_then_killed(result, "TF_CONFIG", ports)


def _assert_named_then_killed(result, source, ports):
    """A warning at 2 s naming worker 1, then the deadline's kill at 4 s."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("compat_distribute:")]
    assert lines == [
        "compat_distribute: warning: " + _waiting(source, ports, 2, 4),
        "compat_distribute: error: " + _waiting(source, ports, 4, 4) + " Killing it now (SIGKILL).",
    ], result.stderr[-3000:]
    assert result.stdout == "building\n"
    assert result.returncode == -9


def test_the_warning_says_how_to_set_a_deadline():
    (port,) = _free_ports(1)
    peers = [("chief 0", f"127.0.0.1:{port}")]
    assert _cluster_wait._waiting_text("worker 0", peers, 30, None) == (
        "MultiWorkerMirroredStrategy() in task worker 0 has waited 30 s for the other tasks of "
        f"its cluster (TF_CONFIG): nothing listens yet at chief 0 (127.0.0.1:{port}): start "
        "each task with the same TF_CONFIG cluster and its own TF_CONFIG['task'], or correct "
        "the addresses. TensorFlow waits up to an hour and has no option to shorten that (its "
        "CommunicationOptions(timeout_seconds=...) bounds collectives, not this wait); set "
        "COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT=SECONDS to end this process after that long."
    )


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "100000"])
def test_a_bad_deadline_is_refused_before_tf_is_touched(monkeypatch, value):
    calls = []
    monkeypatch.setattr(
        tf_collective.CollectiveAllReduceStrategy, "__init__", lambda *a, **k: calls.append(a)
    )
    monkeypatch.setenv(_cluster_wait.DEADLINE_ENV, value)
    with pytest.raises(ValueError) as info:
        cd.MultiWorkerMirroredStrategy()
    assert str(info.value) == (
        "COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT must be a number of seconds > 0 and at most "
        f"86400; got {value!r}. It bounds how long MultiWorkerMirroredStrategy() waits for "
        "the other tasks of its cluster; past it the process ends, naming the tasks. Set it "
        "so, or unset it for the default (TensorFlow's own wait, an hour)."
    )
    assert calls == []


# The watcher for a cluster_resolver= cluster, importing the process's own package
# and outliving a Ctrl-C.

PACKAGE = os.path.dirname(os.path.abspath(_cluster_wait.__file__))


def _waiting(source, ports, waited, limit):
    where, cluster, place = _cluster_wait.SOURCES[source]
    return (
        f"MultiWorkerMirroredStrategy() in task worker 0 has waited {waited} s for the other "
        f"tasks of its cluster ({where}): nothing listens yet at worker 1 "
        f"(127.0.0.1:{ports[1]}): start each task with the same {cluster} and {place}, or "
        f"correct the addresses. COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT={limit} ends this "
        f"process at {limit} s."
    )


# TF 2.21 waits for the tasks of any resolver's cluster (collective_all_reduce_strategy's
# _initialize_multi_worker reads cluster_resolver.cluster_spec()), eagerly: no TF_CONFIG here.
_RESOLVER_WORKER = """
import tensorflow as tf
from compat_distribute import _cluster_wait
_cluster_wait.WARN_AFTER_S = 2
import compat_distribute as cd
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.train.ClusterSpec({"worker": ["127.0.0.1:%d", "127.0.0.1:%d"]}),
    task_type="worker", task_id=0)
print("building", flush=True)
cd.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
print("built", flush=True)
"""


@pytest.mark.multi_worker
def test_a_resolvers_peer_that_never_starts_is_named_and_the_deadline_ends_the_wait(
    run_python, monkeypatch
):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    ports = _free_ports(2)
    result = run_python(
        _RESOLVER_WORKER % tuple(ports), timeout=120, env={_cluster_wait.DEADLINE_ENV: "4"}
    )
    _assert_named_then_killed(result, "cluster_resolver", ports)


def test_in_a_tf1_graph_a_resolvers_cluster_is_not_waited_for(run_python):
    # TF starts no server outside eager mode: the strategy is built at once, and
    # the watcher, released with it, says nothing.
    result = run_python("""
        import time
        import tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        from compat_distribute import _cluster_wait
        _cluster_wait.WARN_AFTER_S = 1
        import compat_distribute as cd
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}),
            task_type="worker", task_id=0)
        strategy = cd.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
        time.sleep(2)
        print(strategy.num_replicas_in_sync, strategy.extended.worker_devices)
        """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "2 ('/job:worker/replica:0/task:0/device:CPU:0',)"
    assert "compat_distribute:" not in result.stderr


def test_a_resolvers_cluster_is_read_as_tf_config_would_give_it():
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"chief": ["127.0.0.1:1"], "worker": {2: "127.0.0.1:3"}}),
        task_type="chief",
        task_id=0,
    )
    config = _cluster_wait.from_resolver(resolver)
    assert config.cluster == {"chief": ("127.0.0.1:1",), "worker": {2: "127.0.0.1:3"}}
    assert _cluster_wait._peers(config) == [("worker 2", "127.0.0.1:3")]
    empty = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}))
    assert _cluster_wait.from_resolver(empty) is None


# A process that found the package through its own sys.path (not PYTHONPATH, not
# its working directory), with a Ctrl-C handler that, like TensorFlow holding the
# interpreter, does not stop it.
_WATCHED = """
import signal, sys, time
sys.path.insert(0, sys.argv[1])
from compat_distribute import _cluster_wait
from compat_distribute._tf_config import TFConfig
signal.signal(signal.SIGINT, lambda *_: print("SIGINT", flush=True))
_cluster_wait.WARN_AFTER_S = 1
config = TFConfig({"worker": ["127.0.0.1:%d", "127.0.0.1:%d"]}, "worker", 0)
with _cluster_wait.watching(config, limit=5):
    print("waiting", flush=True)
    time.sleep(60)
print("not killed", flush=True)
"""


def test_the_watcher_imports_the_processs_package_and_outlives_a_ctrl_c(tmp_path):
    # A copy of the package whose watcher speaks differently: the line says
    # which copy the watcher imported.
    root = tmp_path / "elsewhere"
    shutil.copytree(PACKAGE, root / "compat_distribute",
                    ignore=shutil.ignore_patterns("__pycache__"))
    wait_py = root / "compat_distribute" / "_cluster_wait.py"
    wait_py.write_text(wait_py.read_text().replace('"compat_distribute: ', '"copied: '))
    ports = _free_ports(2)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_WATCHED % tuple(ports)), str(root)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives a program
    )
    try:
        assert process.stdout.readline() == "waiting\n"
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the group
        out, err = process.communicate(timeout=deadlines.scaled(60))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert out == "SIGINT\n"
    assert [line for line in err.splitlines() if line] == [
        "copied: warning: " + _waiting("TF_CONFIG", ports, 1, 5),
        "copied: error: " + _waiting("TF_CONFIG", ports, 5, 5) + " Killing it now (SIGKILL).",
    ]
    assert process.returncode == -9
