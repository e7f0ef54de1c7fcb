"""local_cluster runs: tasks, their TF_CONFIG, output and devices, and seed
behaviours of MultiWorkerMirroredStrategy across two real workers.

Two module-scoped clusters serve every test here; the last test tears one down.
"""

import gc
import json
import os
import signal
import socket
import sys
import threading
import time

import cluster_tasks as tasks
import numpy as np
import pytest
from cluster_checks import HOST_NETWORK
from cluster_checks import assert_no_leaks
from cluster_checks import require_private_network
from support.load import bound

from compat_distribute.testing.cluster import local_cluster


# --------------------------------------------------------------------------
# Shared clusters.


@pytest.fixture(scope="module", name="pair")
def pair_fixture():
    """Two workers, no chief, one device each; private network where available."""
    c = local_cluster(2, timeout=60, env={"CLUSTER_TEST_MARK": "from-env"}).start()
    pids = c.pids
    namespace = c.run(tasks.task_info, "namespace")[0]["network_namespace"]
    yield c
    c.stop()
    assert_no_leaks(pids, namespace)


@pytest.fixture(scope="module", name="with_chief")
def with_chief_fixture():
    """A chief and one worker, three virtual CPUs each."""
    c = local_cluster(1, has_chief=True, devices_per_worker=3, timeout=60).start()
    yield c
    c.stop()


# --------------------------------------------------------------------------
# Normal runs.


@pytest.mark.multi_worker(2)
def test_run_returns_results_in_task_order_with_own_tf_config(pair):
    parent_tf_config = os.environ.get("TF_CONFIG")
    results = pair.run(tasks.task_info, tag="first")

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
    # One network for the cluster: this process's, or a private one.
    namespaces = {r["network_namespace"] for r in results}
    assert len(namespaces) == 1
    assert (namespaces != {HOST_NETWORK}) == (pair.network == "private")


@pytest.mark.multi_worker(2)
def test_workers_are_reused_across_runs(pair):
    pids = pair.pids
    first = pair.run(tasks.task_info, "a")
    second = pair.run(tasks.task_info, "b")
    assert [r["pid"] for r in first] == [r["pid"] for r in second] == pids
    assert [r["tag"] for r in second] == ["b", "b"]


@pytest.mark.multi_worker(2)
def test_output_of_a_task_is_kept(pair):
    assert pair.run(tasks.print_and_return, "hello there") == ["hello there"] * 2
    assert "('worker', 1): hello there" in pair.output("worker", 1)
    with pytest.raises(
        ValueError,
        match=r"task_type, task_id must name a task of this cluster; got 'chief', 0 \(int\)\. "
        r"Its tasks: \('worker', 0\), \('worker', 1\)\.",
    ):
        pair.output("chief", 0)


@pytest.mark.multi_worker(2)
def test_large_arguments_and_results_travel_whole(pair):
    array = np.arange(1_000_000, dtype=np.float32)
    results = pair.run(tasks.scaled, array, factor=2.0)
    assert [task_id for task_id, _ in results] == [0, 1]
    for _, doubled in results:
        assert doubled.dtype == np.float32 and doubled.shape == (1_000_000,)
        assert float(doubled[-1]) == 1_999_998.0 and float(doubled.sum()) == float((array * 2).sum())


@pytest.mark.multi_worker(2)
def test_chief_comes_first_and_alone_should_checkpoint(with_chief):
    facts = with_chief.run(tasks.strategy_facts)
    assert with_chief.task_names == ["chief 0", "worker 0"]
    assert [(f["task_type"], f["task_id"]) for f in facts] == [("chief", 0), ("worker", 0)]
    assert [f["should_checkpoint"] for f in facts] == [True, False]
    # Three devices per task, and MultiWorkerMirroredStrategy uses them all.
    assert [f["num_replicas_in_sync"] for f in facts] == [6, 6]


@pytest.mark.multi_worker(2)
def test_devices_per_worker_gives_virtual_cpus_and_replicas(with_chief):
    assert with_chief.run(tasks.local_cpu_count) == [3, 3]
    # Each of the 6 replicas adds 1.5.
    assert with_chief.run(tasks.all_reduce_sum, 1.5) == [[9.0] * 3, [9.0] * 3]


# --------------------------------------------------------------------------
# Seed behaviours of MultiWorkerMirroredStrategy across two real workers.


@pytest.mark.multi_worker(2)
def test_resolver_and_should_checkpoint_come_from_tf_config(pair):
    facts = pair.run(tasks.strategy_facts)
    assert [(f["task_type"], f["task_id"]) for f in facts] == [("worker", 0), ("worker", 1)]
    # Without a chief, worker 0 plays the chief.
    assert [f["should_checkpoint"] for f in facts] == [True, False]
    assert [f["num_replicas_in_sync"] for f in facts] == [2, 2]


@pytest.mark.multi_worker(2)
def test_run_doubles_a_constant_on_each_replica(pair):
    assert pair.run(tasks.doubled_constant) == [[42.0], [42.0]]


@pytest.mark.multi_worker(2)
def test_all_reduce_of_values_from_function_sums_over_replicas(pair):
    # Replica ids 0 and 1, plus one: 1 + 2 on every replica.
    assert pair.run(tasks.all_reduce_of_replica_ids, use_shim=False) == [[3.0], [3.0]]
    assert pair.run(tasks.all_reduce_of_replica_ids, use_shim=True) == [[3.0], [3.0]]


@pytest.mark.multi_worker(2)
def test_documented_all_reduce_example_fails_on_tf_and_passes_on_the_shim(pair):
    # TF 2.21, one device per worker: the docstring example cannot even trace.
    assert (
        pair.run(tasks.documented_all_reduce_example, use_shim=False)
        == ["ValueError: destinations can not be empty"] * 2
    )
    # The shim runs it verbatim: replica ids 0 + 1 on every replica.
    assert pair.run(tasks.documented_all_reduce_example, use_shim=True) == [[1], [1]]


@pytest.mark.multi_worker(2)
def test_two_workers_train_to_the_same_weights_as_one(pair):
    on_two = pair.run(tasks.train_linear, distributed=True)
    on_one = pair.run(tasks.train_linear, distributed=False)[0]

    # The same SGD on the whole global batch, in NumPy.
    x, y = tasks.training_data()
    w, b = np.zeros((3, 1), np.float32), np.float32(0.0)
    for _ in range(tasks.TRAIN_STEPS):
        residual = x @ w + b - y
        w = w - tasks.LEARNING_RATE * 2 * x.T @ residual / tasks.GLOBAL_BATCH
        b = b - tasks.LEARNING_RATE * 2 * residual.sum() / tasks.GLOBAL_BATCH
    expected = w.ravel().tolist() + [float(b)]

    assert on_two[0] == on_two[1]  # Both workers hold the same weights.
    np.testing.assert_allclose(on_two[0], on_one, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(on_one, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(on_one, 0.0)  # It moved.


@pytest.mark.multi_worker(2)
def test_worker_strategy_refuses_a_factory_that_returns_no_strategy(pair):
    assert pair.run(tasks.strategy_from_bad_factory) == [
        "factory not_a_strategy returned 'MultiWorkerMirroredStrategy' (str), not a "
        "tf.distribute strategy; worker_strategy caches and returns what the factory "
        "builds. Pass None for tf.distribute.MultiWorkerMirroredStrategy, or a callable "
        "that takes no arguments and returns a strategy, such as the class "
        "compat_distribute.MultiWorkerMirroredStrategy (the class itself, not an instance "
        "or its name)."
    ] * 2


# --------------------------------------------------------------------------
# Network: TensorFlow's gRPC server listens on 0.0.0.0, whatever TF_CONFIG says.


@pytest.mark.multi_worker(2)
def test_private_network_hides_the_servers_from_this_process(pair):
    require_private_network(pair)
    # The servers are up and the workers reach each other: a real all-reduce.
    assert pair.run(tasks.all_reduce_sum, 1.5) == [[3.0], [3.0]]
    addresses = list(pair.cluster_spec["worker"])
    assert pair.run(tasks.connect_to, addresses[1]) == ["ok", "ok"]
    assert pair.run(tasks.connect_to, addresses[0]) == ["ok", "ok"]
    # From this process (the host's network) neither server exists.
    for address in addresses:
        assert tasks.connect_to(address) == "ConnectionRefusedError"
        host, port = address.rsplit(":", 1)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=5)


@pytest.mark.multi_worker(2)
def test_a_ctrl_c_that_a_finalizer_drops_still_ends_the_run(with_chief, monkeypatch):
    # Python runs the SIGINT handler in whatever the main thread runs next; in a
    # finalizer (here a gc callback) the KeyboardInterrupt is dropped.
    with_chief.start()
    pids = with_chief.pids
    main = threading.get_ident()
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: dropped.append(unraisable.exc_type))
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)
    sent = []

    def ctrl_c_inside_gc(phase, info):
        del info
        if phase == "start" and not sent and threading.get_ident() == main:
            if time.monotonic() - start > 1.0:
                sent.append(time.monotonic())
                signal.pthread_kill(main, signal.SIGINT)
                for _ in range(100):  # The handler runs in this loop, and raises here.
                    pass

    threshold = gc.get_threshold()
    gc.callbacks.append(ctrl_c_inside_gc)
    gc.set_threshold(1)  # A collection at (almost) every allocation.
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            with_chief.run(tasks.sleep_forever)
    finally:
        gc.callbacks.remove(ctrl_c_inside_gc)
        gc.set_threshold(*threshold)
        signal.signal(signal.SIGINT, interrupt)
    assert len(sent) == 1 and dropped == [KeyboardInterrupt]
    assert time.monotonic() - sent[0] < bound(2.0)
    assert not with_chief.running
    assert_no_leaks(pids)


@pytest.mark.multi_worker(2)
def test_keyboard_interrupt_during_a_run_leaves_no_process(with_chief):
    # Last in the module: it tears the shared chief cluster down.
    with_chief.start()
    pids = with_chief.pids
    main = threading.get_ident()
    # A Ctrl-C, as the terminal sends it. A session started as a background job
    # of a non-interactive shell (`make test &`, some CI runners) inherits SIGINT
    # ignored, and Python then leaves it so: give it Python's own handler.
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            with_chief.run(tasks.sleep_forever)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, interrupt)
    assert time.monotonic() - start < bound(5.0)
    assert not with_chief.running
    assert_no_leaks(pids)
