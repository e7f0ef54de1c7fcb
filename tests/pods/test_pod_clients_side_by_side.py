"""Two pod clients at once, each with its own v4-16 (2 hosts): neither meets the other.

Each client is a process of its own (a pod client changes its process's
TensorFlow context for good), forked with the other from one program before
either starts TensorFlow's context. They run side by side, as pytest-xdist runs
pod test files side by side: each connects as TPU code does (connect,
initialize the TPU system, connect again), reads its own global batches
through the hosts' input pipelines (V2 distributed dataset; the V1 iterator,
read once, reset by its eager `initialize()` while host 1 is busy, then read
from the start by a `tf.function` step: the reset must have reached every
core first) and all-reduces a value of its own process that its hosts fetch
from it. Values are offset per client, so a batch or sum that crossed over to
the other client would show.
"""

import json
import os

import pytest
from support.processes import wait_gone


CLIENT_TIMEOUT_S = 300
# Global batches each client reads, of one element per replica (8 on a v4-16).
BATCHES = 3
REPLICAS = 8
# Client k reads the integers OFFSETS[k] ... OFFSETS[k] + BATCHES * REPLICAS - 1.
OFFSETS = (1000, 2000)

_CLIENTS = """
import json, os, sys, traceback

import tensorflow as tf

import compat_distribute
from compat_distribute import _exit
from compat_distribute.testing import fake_tpu


def listening_ports():
    # TCP ports this process listens on, from /proc (its sockets' inodes).
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/self/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def values(strategy, per_replica):
    return [int(v) for r in strategy.experimental_local_results(per_replica) for v in r.numpy()]


def client(offset, batches):
    out = {}
    with fake_tpu("v4-16") as fake:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        tf.config.experimental_connect_to_cluster(resolver)  # again, as much TPU code does
        strategy = tf.distribute.TPUStrategy(resolver)
        out["hosts"] = fake.pod.pids
        out["relay"] = fake.pod.relay_pid  # None on the host network
        from compat_distribute.testing import _tf

        own = [j for j in _tf.get_server_def().cluster.job if j.name == "localhost"][0]
        out["client_port"] = int(own.tasks[0].rsplit(":", 1)[1])
        out["listening"] = listening_ports()
        n = strategy.num_replicas_in_sync
        dataset = tf.data.Dataset.range(offset, offset + batches * n).batch(n)
        out["v2_batches"] = [
            values(strategy, b) for b in strategy.experimental_distribute_dataset(dataset)
        ]
        v1 = compat_distribute.TPUStrategy(resolver, steps_per_run=2)
        iterator = v1.make_dataset_iterator(dataset)
        iterator.initialize()
        first = values(v1, iterator.get_next())

        @tf.function
        def read():  # a step right after the reset: it must see the reset on every core
            return v1.experimental_local_results(iterator.get_next())

        read.get_concrete_function()  # traced now, so that the call below starts at once
        with tf.device("/job:worker/replica:0/task:1/device:CPU:3"):
            busy = tf.random.normal([2500, 2500])
            for _ in range(3):  # seconds of work: host 1's next ops queue behind it
                busy = tf.linalg.matmul(busy, busy) / 2500.0
        iterator.initialize()  # back to the first batch, on both hosts
        out["v1_batches"] = [first] + [
            [int(v) for r in read() for v in r.numpy()] for _ in range(batches)
        ]
        with tf.device("/job:localhost/replica:0/task:0/device:CPU:0"):
            base = tf.constant(offset)

        @tf.function
        def step():
            def replica():
                ctx = tf.distribute.get_replica_context()
                return ctx.all_reduce("SUM", base + ctx.replica_id_in_sync_group)

            return strategy.run(replica)

        out["all_reduce"] = sorted(set(int(v) for v in strategy.experimental_local_results(step())))
    return out


batches, offsets = int(sys.argv[1]), [int(a) for a in sys.argv[2:]]
children = []
for offset in offsets:  # Forked before TensorFlow's context starts: clients of their own.
    pid = os.fork()
    if pid == 0:
        try:
            print("RESULT " + json.dumps(dict(client(offset, batches), offset=offset)), flush=True)
        except BaseException:  # pylint: disable=broad-except
            traceback.print_exc()
            _exit.end_process(1)
        _exit.end_process(0)  # atexit clean-up, then no wait on TensorFlow's teardown
    children.append(pid)
failed = [pid for pid in children if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0]
sys.exit(1 if failed else 0)
"""


def _expected_batches(offset):
    """Each host's pipeline reads its share of every global batch, host 0's first:
    the pipelines take the dataset's elements in turn (auto-sharding by element)."""
    return [
        [offset + b * REPLICAS + e for e in (*range(0, REPLICAS, 2), *range(1, REPLICAS, 2))]
        for b in range(BATCHES)
    ]


@pytest.mark.multi_worker
def test_two_pod_clients_side_by_side_get_their_own_values_and_leave_nothing(run_program, tmp_path):
    run = run_program(
        ["-c", _CLIENTS, str(BATCHES), *map(str, OFFSETS)],
        timeout=CLIENT_TIMEOUT_S,
        env={"TMPDIR": str(tmp_path)},
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and len(lines) == len(OFFSETS), run.stderr[-5000:]
    results = [json.loads(line[len("RESULT ") :]) for line in lines]
    results.sort(key=lambda r: r["offset"])  # in the order they ended

    for offset, result in zip(OFFSETS, results):
        expected = _expected_batches(offset)
        assert result["v2_batches"] == expected
        # Read once, reset, then read from the start by a tf.function step.
        assert result["v1_batches"] == expected[:1] + expected
        assert result["all_reduce"] == [REPLICAS * offset + sum(range(REPLICAS))]
        # The hosts call their client back at the port its server listens on.
        assert result["client_port"] in result["listening"]
    ports = [r["client_port"] for r in results]
    assert len(set(ports)) == 2, ports
    # Each client stopped its own hosts (and relay): nothing of them is left.
    pids = [p for r in results for p in r["hosts"] + ([r["relay"]] if r["relay"] else [])]
    assert len(set(pids)) == len(pids)
    assert wait_gone(pids) == []
    # The hosts' directories (their logs and TMPDIRs) are gone too, and so are
    # AutoGraph's sources of the clients' functions.
    assert os.listdir(tmp_path) == []
