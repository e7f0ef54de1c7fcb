"""An 8-host preset (v6e-32: 8 hosts x 4 chips) runs end to end in one client.

The client is a process of its own, forked from the session's warm interpreter
(a pod client changes its process's TensorFlow context for good). It starts the
8 hosts, connects as TPU code does, checks that every host feeds its own
replicas, all-reduces over the 32 replicas, and reports how long each phase
took; the test prints those figures (start-up is the hosts' start, the
connection and the first all-reduce).
"""

import json
import os

import pytest
from support.processes import wait_gone


CLIENT_TIMEOUT_S = 300
HOSTS = 8
REPLICAS = 32

_CLIENT = """
import json, os, time

import tensorflow as tf

from compat_distribute import _exit
from compat_distribute.testing import fake_tpu

out = {}
fake = fake_tpu("v6e-32")
started = time.monotonic()
fake.start()
out["hosts_s"] = time.monotonic() - started
resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
tf.config.experimental_connect_to_cluster(resolver)
strategy = tf.distribute.TPUStrategy(resolver)
out["connect_s"] = time.monotonic() - started - out["hosts_s"]


@tf.function
def step():
    def replica():
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce("SUM", ctx.replica_id_in_sync_group)

    return strategy.run(replica)


out["all_reduce"] = sorted(set(int(v) for v in strategy.experimental_local_results(step())))
out["start_up_s"] = time.monotonic() - started
out["shape"] = [strategy.num_replicas_in_sync, strategy.extended.num_hosts,
                strategy.extended.num_replicas_per_host]
out["hosts"] = fake.pod.pids
out["relay"] = fake.pod.relay_pid
contexts = []


def dataset_fn(context):
    contexts.append([context.num_input_pipelines, context.input_pipeline_id])
    return tf.data.Dataset.range(64).batch(context.get_per_replica_batch_size(64))


iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
batch = next(iterator)
out["input_pipelines"] = contexts
out["first_batch_sizes"] = [int(v.shape[0]) for v in strategy.experimental_local_results(batch)]
fake.stop()
print("RESULT " + json.dumps(out), flush=True)
_exit.end_process(0)  # atexit clean-up, then no wait on TensorFlow's teardown
"""


@pytest.mark.multi_worker
def test_an_eight_host_preset_feeds_each_host_and_all_reduces(run_python, tmp_path):
    result = run_python(_CLIENT, timeout=CLIENT_TIMEOUT_S, env={"TMPDIR": str(tmp_path)})
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-5000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    print(
        f"v6e-32 start-up {out['start_up_s']:.1f} s: hosts {out['hosts_s']:.1f} s, "
        f"connect {out['connect_s']:.1f} s, first all-reduce "
        f"{out['start_up_s'] - out['hosts_s'] - out['connect_s']:.1f} s"
    )
    assert out["shape"] == [REPLICAS, HOSTS, REPLICAS // HOSTS]
    assert out["all_reduce"] == [sum(range(REPLICAS))]
    # One input pipeline per host, each feeding its 4 replicas 2 elements each.
    assert out["input_pipelines"] == [[HOSTS, i] for i in range(HOSTS)]
    assert out["first_batch_sizes"] == [64 // REPLICAS] * REPLICAS
    pids = out["hosts"] + ([out["relay"]] if out["relay"] else [])
    assert len(set(out["hosts"])) == HOSTS
    assert wait_gone(pids) == []
    assert os.listdir(tmp_path) == []  # the hosts' directory, AutoGraph's sources
