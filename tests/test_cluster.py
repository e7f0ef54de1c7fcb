"""local_cluster: real worker processes, their faults, and seed behaviours of
MultiWorkerMirroredStrategy across two real workers.

The functions the workers run are defined at the top of this module: each
worker imports this module by name (it is on the parent's sys.path, which the
workers inherit). Multi-process tests share two module-scoped clusters; each
fault case starts its own, since a fault tears its cluster down.
"""

import functools
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import types

import numpy as np
import pytest

from compat_distribute.testing import cluster as cluster_lib
from compat_distribute.testing.cluster import ClusterError
from compat_distribute.testing.cluster import ClusterTaskError
from compat_distribute.testing.cluster import ClusterTimeoutError
from compat_distribute.testing.cluster import local_cluster
from compat_distribute.testing.cluster import parse_tf_config

# --------------------------------------------------------------------------
# Functions run inside the workers.


def task_info(tag):
    return {
        "task": cluster_lib.current_task(),
        "pid": os.getpid(),
        "tf_config": os.environ["TF_CONFIG"],
        "env_mark": os.environ.get("CLUSTER_TEST_MARK"),
        "tag": tag,
    }


def print_and_return(text):
    print(f"{cluster_lib.current_task()}: {text}")
    return text


def local_cpu_count():
    import tensorflow as tf

    # Once a strategy joined the cluster, every task's devices are listed.
    task_type, task_id = cluster_lib.current_task()
    mine = f"/job:{task_type}/replica:0/task:{task_id}/"
    return sum(
        "/job:" not in d.name or mine in d.name for d in tf.config.list_logical_devices("CPU")
    )


def strategy_facts():
    s = cluster_lib.worker_strategy()
    return {
        "task_type": s.cluster_resolver.task_type,
        "task_id": s.cluster_resolver.task_id,
        "should_checkpoint": s.extended.should_checkpoint,
        "num_replicas_in_sync": s.num_replicas_in_sync,
    }


def doubled_constant():
    import tensorflow as tf

    s = cluster_lib.worker_strategy()
    result = s.run(lambda x: x * 2, args=(tf.constant(21.0),))
    return [float(v) for v in s.experimental_local_results(result)]


def all_reduce_of_replica_ids(use_shim):
    """Sum over replicas of replica_id + 1, from values_from_function."""
    import tensorflow as tf

    import compat_distribute

    s = cluster_lib.worker_strategy(
        compat_distribute.MultiWorkerMirroredStrategy if use_shim else None
    )

    def step():
        values = s.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(ctx.replica_id_in_sync_group + 1.0)
        )
        return s.run(
            lambda v: tf.distribute.get_replica_context().all_reduce("sum", v), args=(values,)
        )

    # Raw TF only manages this eagerly; the shim also inside tf.function.
    step = tf.function(step) if use_shim else step
    return [float(v) for v in s.experimental_local_results(step())]


def documented_all_reduce_example(use_shim):
    """The ReplicaContext.all_reduce example of TF's Strategy.run docstring, verbatim."""
    import tensorflow as tf

    import compat_distribute

    strategy = cluster_lib.worker_strategy(
        compat_distribute.MultiWorkerMirroredStrategy if use_shim else None
    )
    try:
        # --- verbatim from tf.distribute.Strategy.run, example 3 ---
        @tf.function
        def run():
            def value_fn(value_context):
                return tf.constant(value_context.replica_id_in_sync_group)

            distributed_values = strategy.experimental_distribute_values_from_function(value_fn)

            def replica_fn(input):
                return tf.distribute.get_replica_context().all_reduce("sum", input)

            return strategy.run(replica_fn, args=(distributed_values,))

        result = run()
        # ---
    except ValueError as e:
        return str(e).strip().splitlines()[-1].strip()  # Past tf.function's "in user code"
    return [int(v) for v in strategy.experimental_local_results(result)]


def all_reduce_sum(value):
    import tensorflow as tf

    s = cluster_lib.worker_strategy()
    result = s.run(
        lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(value))
    )
    return [float(v) for v in s.experimental_local_results(result)]


# A tiny linear model: y = x @ W_TRUE + B_TRUE, global batch of 8 rows.
GLOBAL_BATCH = 8
LEARNING_RATE = 0.1
TRAIN_STEPS = 5
W_TRUE = np.array([[1.0], [-2.0], [0.5]], np.float32)
B_TRUE = 0.3


def _training_data():
    x = np.random.default_rng(0).normal(size=(GLOBAL_BATCH, 3)).astype(np.float32)
    return x, (x @ W_TRUE + B_TRUE).astype(np.float32)


def train_linear(distributed):
    """Plain SGD, custom loop; each replica takes its slice of the global batch."""
    import tensorflow as tf

    strategy = cluster_lib.worker_strategy() if distributed else tf.distribute.get_strategy()
    x_all, y_all = _training_data()
    with strategy.scope():
        # MEAN: the update is identical on every replica after the all-reduce.
        w = tf.Variable(tf.zeros((3, 1)), aggregation=tf.VariableAggregation.MEAN)
        b = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)

    def replica_step():
        ctx = tf.distribute.get_replica_context()
        per_replica = GLOBAL_BATCH // ctx.num_replicas_in_sync
        start = ctx.replica_id_in_sync_group * per_replica
        x = tf.constant(x_all)[start : start + per_replica]
        y = tf.constant(y_all)[start : start + per_replica]
        with tf.GradientTape() as tape:
            # Scaled by the global batch, so the summed gradient is the mean.
            loss = tf.reduce_sum(tf.square(x @ w + b - y)) / GLOBAL_BATCH
        grads = ctx.all_reduce("sum", tape.gradient(loss, [w, b]))
        w.assign_sub(LEARNING_RATE * grads[0])
        b.assign_sub(LEARNING_RATE * grads[1])

    step = tf.function(lambda: strategy.run(replica_step))
    for _ in range(TRAIN_STEPS):
        step()
    return w.numpy().ravel().tolist() + [float(b.numpy())]


def raise_on_worker_1(message):
    print("about to fail")
    if cluster_lib.current_task() == ("worker", 1):
        raise ValueError(message)
    return "fine"


def exit_on_worker_1():
    if cluster_lib.current_task() == ("worker", 1):
        os._exit(3)
    time.sleep(60)


def hang_worker_1_in_sleep():
    """Worker 1 never builds its strategy; worker 0 waits for it in TF."""
    if cluster_lib.current_task() == ("worker", 1):
        time.sleep(3600)
    return all_reduce_sum(1.0)


def sleep_forever():
    time.sleep(3600)


# --------------------------------------------------------------------------
# Process-table checks.


def _children_by_parent():
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:  # Gone meanwhile.
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid=None):
    children = _children_by_parent()
    found, todo = set(), [pid or os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


def assert_no_leaks(pids):
    """`pids` are gone (dead and reaped); every descendant of this process
    belongs to a cluster that is still running (the shared fixtures)."""
    assert pids, "no pids recorded"
    assert [p for p in pids if os.path.exists(f"/proc/{p}")] == []
    running = {p for c in list(cluster_lib._LIVE_CLUSTERS) for p in c.pids}
    assert descendants() - running == set()


# --------------------------------------------------------------------------
# Shared clusters.


@pytest.fixture(scope="module", name="pair")
def pair_fixture():
    """Two workers, no chief, one device each."""
    c = local_cluster(2, timeout=60, env={"CLUSTER_TEST_MARK": "from-env"}).start()
    pids = c.pids
    yield c
    c.stop()
    assert_no_leaks(pids)


@pytest.fixture(scope="module", name="with_chief")
def with_chief_fixture():
    """A chief and one worker, three virtual CPUs each."""
    c = local_cluster(1, has_chief=True, devices_per_worker=3, timeout=60).start()
    yield c
    c.stop()


# --------------------------------------------------------------------------
# Normal runs.


@pytest.mark.multi_worker
def test_run_returns_results_in_task_order_with_own_tf_config(pair):
    parent_tf_config = os.environ.get("TF_CONFIG")
    results = pair.run(task_info, tag="first")

    assert pair.task_names == ["worker 0", "worker 1"]
    assert [r["task"] for r in results] == [("worker", 0), ("worker", 1)]
    assert [r["pid"] for r in results] == pair.pids
    assert [r["env_mark"] for r in results] == ["from-env", "from-env"]
    assert [r["tag"] for r in results] == ["first", "first"]
    addresses = pair.cluster_spec["worker"]
    assert len(addresses) == 2 and all(a.startswith("127.0.0.1:") for a in addresses)
    for index, r in enumerate(results):
        assert json.loads(r["tf_config"]) == {
            "cluster": {"worker": list(addresses)},
            "task": {"type": "worker", "index": index},
            "rpc_layer": "grpc",
        }
    assert os.environ.get("TF_CONFIG") == parent_tf_config


@pytest.mark.multi_worker
def test_workers_are_reused_across_runs(pair):
    pids = pair.pids
    first = pair.run(task_info, "a")
    second = pair.run(task_info, "b")
    assert [r["pid"] for r in first] == [r["pid"] for r in second] == pids
    assert [r["tag"] for r in second] == ["b", "b"]


@pytest.mark.multi_worker
def test_output_of_a_task_is_kept(pair):
    assert pair.run(print_and_return, "hello there") == ["hello there"] * 2
    assert "('worker', 1): hello there" in pair.output("worker", 1)
    with pytest.raises(ValueError, match="no running task chief 0; tasks: worker 0, worker 1"):
        pair.output("chief", 0)


@pytest.mark.multi_worker
def test_chief_comes_first_and_alone_should_checkpoint(with_chief):
    facts = with_chief.run(strategy_facts)
    assert with_chief.task_names == ["chief 0", "worker 0"]
    assert [(f["task_type"], f["task_id"]) for f in facts] == [("chief", 0), ("worker", 0)]
    assert [f["should_checkpoint"] for f in facts] == [True, False]
    assert [f["num_replicas_in_sync"] for f in facts] == [2, 2]


@pytest.mark.multi_worker
def test_devices_per_worker_gives_virtual_cpus(with_chief):
    assert with_chief.run(local_cpu_count) == [3, 3]


# --------------------------------------------------------------------------
# Seed behaviours of MultiWorkerMirroredStrategy across two real workers.


@pytest.mark.multi_worker
def test_resolver_and_should_checkpoint_come_from_tf_config(pair):
    facts = pair.run(strategy_facts)
    assert [(f["task_type"], f["task_id"]) for f in facts] == [("worker", 0), ("worker", 1)]
    # Without a chief, worker 0 plays the chief.
    assert [f["should_checkpoint"] for f in facts] == [True, False]
    assert [f["num_replicas_in_sync"] for f in facts] == [2, 2]


@pytest.mark.multi_worker
def test_run_doubles_a_constant_on_each_replica(pair):
    assert pair.run(doubled_constant) == [[42.0], [42.0]]


@pytest.mark.multi_worker
def test_all_reduce_of_values_from_function_sums_over_replicas(pair):
    # Replica ids 0 and 1, plus one: 1 + 2 on every replica.
    assert pair.run(all_reduce_of_replica_ids, use_shim=False) == [[3.0], [3.0]]
    assert pair.run(all_reduce_of_replica_ids, use_shim=True) == [[3.0], [3.0]]


@pytest.mark.multi_worker
def test_documented_all_reduce_example_fails_on_tf_and_passes_on_the_shim(pair):
    # TF 2.21, one device per worker: the docstring example cannot even trace.
    assert (
        pair.run(documented_all_reduce_example, use_shim=False)
        == ["ValueError: destinations can not be empty"] * 2
    )
    # The shim runs it verbatim: replica ids 0 + 1 on every replica.
    assert pair.run(documented_all_reduce_example, use_shim=True) == [[1], [1]]


@pytest.mark.multi_worker
def test_two_workers_train_to_the_same_weights_as_one(pair):
    on_two = pair.run(train_linear, distributed=True)
    on_one = pair.run(train_linear, distributed=False)[0]

    # The same SGD on the whole global batch, in NumPy.
    x, y = _training_data()
    w, b = np.zeros((3, 1), np.float32), np.float32(0.0)
    for _ in range(TRAIN_STEPS):
        residual = x @ w + b - y
        w = w - LEARNING_RATE * 2 * x.T @ residual / GLOBAL_BATCH
        b = b - LEARNING_RATE * 2 * residual.sum() / GLOBAL_BATCH
    expected = w.ravel().tolist() + [float(b)]

    assert on_two[0] == on_two[1]  # Both workers hold the same weights.
    np.testing.assert_allclose(on_two[0], on_one, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(on_one, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(on_one, 0.0)  # It moved.


# --------------------------------------------------------------------------
# Faults: each asserts the error text, a time bound and the process table.


@pytest.mark.multi_worker
def test_exception_names_the_task_then_cluster_refuses_until_restarted():
    c = local_cluster(2, timeout=30).start()
    pids = c.pids
    start = time.monotonic()
    with pytest.raises(ClusterTaskError) as info:
        c.run(raise_on_worker_1, "broken on purpose")
    elapsed = time.monotonic() - start
    error = info.value
    assert (error.task_type, error.task_id, error.exitcode) == ("worker", 1, None)
    text = str(error)
    assert text.startswith(
        "local_cluster: worker 1 raised ValueError: broken on purpose. The cluster was torn down."
    )
    assert "raise ValueError(message)" in text and "in raise_on_worker_1" in text
    assert "about to fail" in error.output_tail
    assert isinstance(error.__cause__, ValueError) and str(error.__cause__) == "broken on purpose"
    assert elapsed < 3.0, elapsed
    assert_no_leaks(pids)

    with pytest.raises(
        ClusterError, match=r"torn down after a fault \(local_cluster: worker 1 raised"
    ):
        c.run(task_info, "again")
    # start() launches fresh tasks.
    c.start()
    try:
        assert [r["task"] for r in c.run(task_info, "again")] == [("worker", 0), ("worker", 1)]
        new_pids = c.pids
        assert set(new_pids).isdisjoint(pids)
    finally:
        c.stop()
    assert_no_leaks(new_pids)
    with pytest.raises(ClusterError, match="not running: use `with local_cluster"):
        c.run(task_info, "stopped")


@pytest.mark.multi_worker
def test_task_that_exits_fails_the_call_with_every_stack():
    c = local_cluster(2, timeout=30).start()
    pids = c.pids
    start = time.monotonic()
    with pytest.raises(ClusterTaskError) as info:
        c.run(exit_on_worker_1)
    elapsed = time.monotonic() - start
    error = info.value
    assert (error.task_type, error.task_id, error.exitcode) == ("worker", 1, 3)
    text = str(error)
    assert text.startswith(
        "local_cluster: worker 1 exited with code 3 during run(test_cluster:exit_on_worker_1). "
        "The cluster was torn down.\nStill running when the call failed: worker 0."
    )
    # Worker 0 was still sleeping: its stack says where.
    assert (
        "Python stacks of worker 0:" in text and "in exit_on_worker_1" in error.stacks["worker 0"]
    )
    assert "Python stacks of worker 1: none (exited with code 3)." in text
    assert elapsed < 5.0, elapsed
    assert_no_leaks(pids)


@pytest.mark.multi_worker
def test_hang_times_out_with_every_stack():
    c = local_cluster(2, timeout=6).start()
    pids = c.pids
    start = time.monotonic()
    with pytest.raises(ClusterTimeoutError) as info:
        c.run(hang_worker_1_in_sleep)
    elapsed = time.monotonic() - start
    error = info.value
    assert str(error).startswith(
        "local_cluster: run(test_cluster:hang_worker_1_in_sleep) did not finish within 6 s "
        "(timeout); still running: worker 0, worker 1. The cluster was torn down."
    )
    assert error.pending == ["worker 0", "worker 1"]
    # Worker 1 sleeps; worker 0 waits for it inside TensorFlow.
    assert "time.sleep" not in error.stacks["worker 1"]  # faulthandler shows frames, not source
    assert "in hang_worker_1_in_sleep" in error.stacks["worker 1"]
    assert "in all_reduce_sum" in error.stacks["worker 0"]
    assert 6.0 <= elapsed < 11.0, elapsed
    assert_no_leaks(pids)


class _OccupiedFirstPortCluster(cluster_lib.LocalCluster):
    """Hands worker 0 a port another socket listens on, on the first launch."""

    def __init__(self, occupied, **kwargs):
        super().__init__(2, **kwargs)
        self.occupied = occupied
        self.launches = []

    def _pick_ports(self, count):
        ports = super()._pick_ports(count)
        if not self.launches:
            ports[0] = self.occupied
        self.launches.append(ports)
        return ports


@pytest.mark.multi_worker
def test_port_taken_before_the_server_binds_is_retried_with_new_ports():
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        occupied = squatter.getsockname()[1]
        c = _OccupiedFirstPortCluster(occupied, timeout=30).start()
        first_pids = c.pids
        try:
            assert c.cluster_spec["worker"][0] == f"127.0.0.1:{occupied}"
            assert c.run(all_reduce_sum, 2.0) == [[4.0], [4.0]]
            assert len(c.launches) == 2
            assert occupied not in c.launches[1]
            assert c.cluster_spec["worker"] == tuple(f"127.0.0.1:{p}" for p in c.launches[1])
            assert set(c.pids).isdisjoint(first_pids)
            pids = first_pids + c.pids
        finally:
            c.stop()
    assert_no_leaks(pids)


class _SilentPeerCluster(cluster_lib.LocalCluster):
    """Worker 1 is a process that never joins the cluster."""

    spawned = ()

    def _spawn(self, task_type, task_id):
        task = super()._spawn(task_type, task_id)
        self.spawned += (task.process.pid,)
        return task

    def _task_command(self, task_type, task_id, fd):
        if (task_type, task_id) == ("worker", 1):
            return [sys.executable, "-c", "import time; time.sleep(600)"]
        return super()._task_command(task_type, task_id, fd)


@pytest.mark.multi_worker
def test_peer_that_never_starts_fails_start_up():
    c = _SilentPeerCluster(2, timeout=30, start_timeout=8)
    start = time.monotonic()
    with pytest.raises(ClusterTimeoutError) as info:
        c.start()
    elapsed = time.monotonic() - start
    error = info.value
    text = str(error)
    # On a busy machine worker 0 may still be importing TensorFlow too.
    assert re.match(
        r"local_cluster: (worker 0, )?worker 1 did not start within 8 s \(start_timeout\); the "
        r"other tasks would wait for them forever, so the cluster was torn down.",
        text,
    )
    assert error.pending[-1] == "worker 1"
    assert "Python stacks of worker 1: none (never said hello)." in text
    # Worker 0 said hello at once: its stack shows where it is (importing or idle).
    assert "Python stacks of worker 0:\n" in text and "<string>" in error.stacks["worker 0"]
    assert 8.0 <= elapsed < 12.0, elapsed
    assert not c.running
    assert len(c.spawned) == 2
    assert_no_leaks(list(c.spawned))


@pytest.mark.multi_worker
def test_keyboard_interrupt_during_a_run_leaves_no_process(with_chief):
    # Last in the module: it tears the shared chief cluster down.
    with_chief.start()
    pids = with_chief.pids
    main = threading.get_ident()
    timer = threading.Timer(1.0, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            with_chief.run(sleep_forever)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 5.0
    assert not with_chief.running
    assert_no_leaks(pids)


# --------------------------------------------------------------------------
# Bad input: no process starts.


class _Stepper:
    def step(self):
        return 1


def _closure_maker():
    def nested():
        return 1

    return nested


@pytest.mark.parametrize(
    "fn, message",
    [
        (
            lambda: 1,
            r"fn is a lambda \(test_cluster:.*<lambda>\); a worker process cannot import a lambda by name",
        ),
        (
            _closure_maker(),
            r"fn test_cluster:_closure_maker.<locals>.nested is defined inside another function",
        ),
        (
            _Stepper().step,
            r"fn <bound method _Stepper.step .*> \(method\) is not reachable as test_cluster:_Stepper.step",
        ),
        (functools.partial(task_info, "x"), r"fn .* \(partial\) has no __module__/__qualname__"),
    ],
)
def test_fn_that_a_worker_cannot_import_is_refused_before_any_process(fn, message):
    before = descendants()
    c = local_cluster(2)
    with pytest.raises((ValueError, TypeError), match=message):
        c.run(fn)
    assert descendants() <= before and not c.running


def test_fn_from_an_unimportable_main_is_refused(monkeypatch):
    fake_main = types.ModuleType("__main__")  # As in `python -c` or a REPL: no file.
    exec("def step():\n    return 1\n", fake_main.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    with pytest.raises(
        ValueError, match=r"fn step is defined in __main__ \(an interactive session"
    ):
        local_cluster(2).run(fake_main.step)


def test_unpicklable_args_are_refused():
    with pytest.raises(TypeError, match="args and kwargs for test_cluster:task_info must pickle"):
        local_cluster(2).run(task_info, threading.Lock())


def test_run_before_start_is_refused():
    with pytest.raises(
        ClusterError, match=r"not running: use `with local_cluster\(...\) as cluster:`"
    ):
        local_cluster(2).run(task_info, "x")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"num_workers": 0},
            ValueError,
            r"num_workers must be a positive int \(>= 1\); got 0 \(int\)",
        ),
        ({"num_workers": "2"}, TypeError, r"num_workers must be a positive int; got '2' \(str\)"),
        (
            {"num_workers": True},
            TypeError,
            r"num_workers must be a positive int; got True \(bool\)",
        ),
        (
            {"devices_per_worker": 0},
            ValueError,
            r"devices_per_worker must be a positive int \(>= 1\); got 0",
        ),
        (
            {"devices_per_worker": 1.5},
            TypeError,
            r"devices_per_worker must be a positive int; got 1.5",
        ),
        (
            {"timeout": 0},
            ValueError,
            r"timeout must be a finite number of seconds > 0; got 0 \(int\)",
        ),
        (
            {"timeout": -3.0},
            ValueError,
            r"timeout must be a finite number of seconds > 0; got -3.0",
        ),
        (
            {"timeout": float("nan")},
            ValueError,
            r"timeout must be a finite number of seconds > 0; got nan",
        ),
        ({"timeout": "10"}, TypeError, r"timeout must be a number of seconds; got '10' \(str\)"),
        ({"start_timeout": 0}, ValueError, r"start_timeout must be a finite number of seconds > 0"),
        ({"has_chief": 1}, TypeError, r"has_chief must be True or False; got 1 \(int\)"),
        ({"env": ["A=1"]}, TypeError, r"env must be a dict of str -> str; got \['A=1'\] \(list\)"),
        ({"env": {"A": 1}}, TypeError, r"env must map str -> str; env\['A'\] = 1 \(int\)"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(kwargs, error, message):
    with pytest.raises(error, match=message):
        local_cluster(**kwargs)


def test_tf_config_in_env_is_checked_then_refused():
    with pytest.raises(
        ValueError,
        match=r"TF_CONFIG is not valid JSON: Expecting ',' delimiter at line 1 column 27 \(char 26\)",
    ):
        local_cluster(env={"TF_CONFIG": '{"cluster": {"worker": [] "task": {}}'})
    with pytest.raises(ValueError, match=r"TF_CONFIG\['task'\]\['index'\] must be an int in 0..0"):
        local_cluster(
            env={
                "TF_CONFIG": '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 1}}'
            }
        )
    with pytest.raises(
        ValueError, match=r"env\['TF_CONFIG'\] is set, but local_cluster writes TF_CONFIG"
    ):
        local_cluster(
            env={
                "TF_CONFIG": '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}'
            }
        )


def test_current_task_and_worker_strategy_refuse_outside_a_worker():
    with pytest.raises(RuntimeError, match="this process is not a local_cluster task"):
        cluster_lib.current_task()
    with pytest.raises(RuntimeError, match="this process is not a local_cluster task"):
        cluster_lib.worker_strategy()


# --------------------------------------------------------------------------
# parse_tf_config


def test_parse_tf_config_reads_a_full_config():
    text = json.dumps(
        {
            "cluster": {"chief": ["localhost:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]},
            "task": {"type": "worker", "index": 1},
            "rpc_layer": "grpc",
        }
    )
    config = parse_tf_config(text)
    assert config.cluster == {"chief": ("localhost:1",), "worker": ("127.0.0.1:2", "127.0.0.1:3")}
    assert (config.task_type, config.task_id, config.rpc_layer) == ("worker", 1, "grpc")
    assert parse_tf_config(config.to_json()) == config


def test_parse_tf_config_accepts_an_evaluator_outside_the_cluster():
    config = parse_tf_config(
        '{"cluster": {"worker": ["h:1"]}, "task": {"type": "evaluator", "index": 0}}'
    )
    assert (config.task_type, config.task_id) == ("evaluator", 0)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "{",
            r"TF_CONFIG is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2 \(char 1\)",
        ),
        ("[]", r"TF_CONFIG must be a JSON object; got \[\] \(list\)"),
        (
            '{"clusters": {}}',
            r"TF_CONFIG\['clusters'\] is not a TF_CONFIG key; the keys are cluster, task, rpc_layer",
        ),
        (
            '{"cluster": ["h:1"]}',
            r"TF_CONFIG\['cluster'\] must be an object mapping each job name to a list",
        ),
        (
            '{"cluster": {"worker": "h:1"}}',
            r"TF_CONFIG\['cluster'\]\['worker'\] must be a non-empty list of 'host:port' strings; got 'h:1'",
        ),
        (
            '{"cluster": {"worker": ["h:1", "h"]}}',
            r"TF_CONFIG\['cluster'\]\['worker'\]\[1\] must be a 'host:port' string with a port in 0..65535; got 'h' \(str\)",
        ),
        (
            '{"cluster": {"worker": ["h:99999"]}}',
            r"TF_CONFIG\['cluster'\]\['worker'\]\[0\] must be a 'host:port' string",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": "worker"}',
            r"TF_CONFIG\['task'\] must be an object",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"index": 0}}',
            r"TF_CONFIG\['task'\]\['type'\] is missing",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"type": "chief", "index": 0}}',
            r"TF_CONFIG\['task'\]\['type'\] must name a job of TF_CONFIG\['cluster'\] \(jobs: 'worker'\); got 'chief' \(str\)",
        ),
        (
            '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 2}}',
            r"TF_CONFIG\['task'\]\['index'\] must be an int in 0..1 \(job 'worker' has 2 task\(s\)\); got 2 \(int\)",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": "0"}}',
            r"TF_CONFIG\['task'\]\['index'\] must be an int in 0..0 .*got '0' \(str\)",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0, "id": 0}}',
            r"TF_CONFIG\['task'\]\['id'\] is not a task key",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "rpc_layer": 1}',
            r"TF_CONFIG\['rpc_layer'\] must be a string; got 1 \(int\)",
        ),
    ],
)
def test_parse_tf_config_names_the_wrong_key(text, message):
    with pytest.raises(ValueError, match=message):
        parse_tf_config(text)


def test_parse_tf_config_wants_text():
    with pytest.raises(TypeError, match=r"TF_CONFIG must be a JSON string; got \{\} \(dict\)"):
        parse_tf_config({})


# --------------------------------------------------------------------------
# Ports


def test_port_picker_never_hands_out_a_port_twice():
    picker = cluster_lib.PortPicker()
    ports = [picker.pick() for _ in range(50)]
    assert len(set(ports)) == 50
    for port in ports[:5]:  # Free when handed out: binding works.
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
