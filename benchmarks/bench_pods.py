"""Fake TPU pods' cost: start-up of a v3-32's 4 hosts to the first all-reduce, and
a step of the pod against a one-host v3-8 and against the same 32 replicas in
one process (`hosts=1`), for a step whose loss is reduced to one value (as a
training step returns it) and for one that returns every replica's output
(each output on another host costs TensorFlow a remote handle).

The three strategies live in one client process, so the steps are timed side
by side, alternating (`_common.compare`). Start-up is timed over cold starts
(fresh host processes each; this process stays the client).

`python benchmarks/bench_pods.py [--cold-starts N] [--repeats N]`.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position

POD = "v3-32"
FEATURES = 64


def _steps(strategy):
    """Two steps of a small matmul per replica, its sum all-reduced: one returns
    the loss reduced to one value (a training step), one every replica's output."""
    import tensorflow as tf

    def replica():
        x = tf.fill([FEATURES, FEATURES], 1.0 / FEATURES)
        total = tf.reduce_sum(tf.matmul(x, x))
        return tf.distribute.get_replica_context().all_reduce("SUM", total)

    @tf.function
    def reduced():
        return strategy.reduce("SUM", strategy.run(replica), axis=None)

    @tf.function
    def per_replica():
        return strategy.run(replica)

    return {
        "reduced": lambda: reduced().numpy(),
        "per_replica": lambda: strategy.experimental_local_results(per_replica())[0].numpy(),
    }


def _cold_start_s():
    """Seconds from starting the pod's hosts to its first all-reduce's result."""
    import tensorflow as tf

    from compat_distribute.testing import fake_tpu

    start = time.perf_counter()
    with fake_tpu(POD) as fake:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
        strategy = tf.distribute.TPUStrategy(resolver)
        value = _steps(strategy)["per_replica"]()
        took = time.perf_counter() - start
        assert value == 32.0 * FEATURES, value
        assert strategy.extended.num_hosts == fake.pod.num_hosts == 4
    return took


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold-starts", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)

    from compat_distribute.testing import set_virtual_devices

    set_virtual_devices(32)  # hosts=1 needs every core here
    from compat_distribute.testing import FakeTPUClusterResolver
    from compat_distribute.testing import FakeTPUStrategy

    starts = [_cold_start_s() for _ in range(args.cold_starts)]

    pod_resolver = FakeTPUClusterResolver(POD)
    try:
        pod = _steps(FakeTPUStrategy(pod_resolver))
        one_process = _steps(FakeTPUStrategy(FakeTPUClusterResolver(POD, hosts=1)))
        v3_8 = _steps(FakeTPUStrategy(FakeTPUClusterResolver("v3-8")))
        timing = dict(repeats=args.repeats, number=5, warmup=2)
        compared = {
            (kind, baseline): _common.compare(pod[kind], steps[kind], **timing)
            for kind in ("reduced", "per_replica")
            for baseline, steps in (("v3-8", v3_8), ("hosts=1", one_process))
        }
    finally:
        pod_resolver.pod.stop()

    start_s = statistics.median(starts)
    kinds = {"reduced": "loss reduced to one value", "per_replica": "32 per-replica outputs"}
    rows = {
        "v3-32 start-up to first all-reduce, s (median)": start_s,
        "v3-32 start-ups, s": starts,
        **{
            f"v3-32 pod step vs {baseline} step, {kinds[kind]}": result
            for (kind, baseline), result in compared.items()
        },
    }
    table = [
        {
            "measure": "v3-32 pod (4 host processes): start-up to first all-reduce",
            "value": f"{start_s:.1f} s (median of {len(starts)})",
            "target": "<= 10 s",
        },
        _common.table_row(
            "v3-32 pod step / v3-8 step, loss reduced to one value (32 vs 8 replicas)",
            compared["reduced", "v3-8"],
            "<= 4.4",
        ),
        _common.table_row(
            "v3-32 pod step / v3-8 step, 32 vs 8 per-replica outputs",
            compared["per_replica", "v3-8"],
            "(reported)",
        ),
        _common.table_row(
            "v3-32 pod step / v3-32 hosts=1 step, loss reduced to one value",
            compared["reduced", "hosts=1"],
            "(reported)",
        ),
        _common.table_row(
            "v3-32 pod step / v3-32 hosts=1 step, 32 per-replica outputs",
            compared["per_replica", "hosts=1"],
            "(reported)",
        ),
    ]
    _common.report("pods", rows, table)
    sys.stdout.flush()
    os._exit(0)  # TensorFlow may block at exit on a context whose hosts are gone.


if __name__ == "__main__":
    main()
