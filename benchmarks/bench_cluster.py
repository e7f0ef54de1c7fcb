"""local_cluster's cost: start-up, a warm `run`, and a 1e6-float all-reduce on 2
workers against the same all-reduce in raw TensorFlow, launched by hand with
subprocess and TF_CONFIG.

Both sides are measured in the same run, alternating, on the same machine.
"""

import json
import os
import socket
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position

NUM_FLOATS = 1_000_000
REPEATS = 2  # Cold starts per side: each costs seconds of TF import.
WARM_RUNS = 30
TIMED_ALL_REDUCES = 20

# --------------------------------------------------------------------------
# Worker side: raw TensorFlow, shared by both launchers.

_STEPS = {}


def _all_reduce_step(strategy):
    import tensorflow as tf

    if strategy not in _STEPS:

        @tf.function
        def step():
            def replica_fn():
                ones = tf.fill([NUM_FLOATS], 1.0)
                return tf.distribute.get_replica_context().all_reduce("sum", ones)

            return strategy.experimental_local_results(strategy.run(replica_fn))[0]

        _STEPS[strategy] = step
    return _STEPS[strategy]


def _one_all_reduce(strategy):
    """Runs one all-reduce; returns an element (2.0: the sum over 2 workers)."""
    return float(_all_reduce_step(strategy)()[0])


def _seconds_per_all_reduce(strategy, reps):
    step = _all_reduce_step(strategy)
    step()  # Traced and warm.
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step().numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# Run through local_cluster (the module is imported by name in each worker).


def cluster_all_reduce_once():
    from compat_distribute.testing import cluster

    return _one_all_reduce(cluster.worker_strategy())


def cluster_seconds_per_all_reduce(reps):
    from compat_distribute.testing import cluster

    return _seconds_per_all_reduce(cluster.worker_strategy(), reps)


def noop():
    return None


# Launched by hand: `python bench_cluster.py --by-hand` with TF_CONFIG set.


def by_hand_worker():
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print(json.dumps({"first": _one_all_reduce(strategy)}), flush=True)
    seconds = _seconds_per_all_reduce(strategy, TIMED_ALL_REDUCES)
    print(json.dumps({"seconds_per_all_reduce": seconds}), flush=True)


# --------------------------------------------------------------------------
# Parent side.


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def measure_by_hand():
    """What one writes without local_cluster: TF_CONFIG per process, Popen, read."""
    addresses = [f"127.0.0.1:{p}" for p in _free_ports(2)]
    start = time.perf_counter()
    procs = []
    for index in range(2):
        tf_config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), TF_CPP_MIN_LOG_LEVEL="2")
        procs.append(
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--by-hand"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
    try:
        firsts = [json.loads(p.stdout.readline())["first"] for p in procs]
        first_s = time.perf_counter() - start
        seconds = [json.loads(p.stdout.readline())["seconds_per_all_reduce"] for p in procs]
        for p in procs:
            p.wait(timeout=60)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert firsts == [2.0, 2.0], firsts
    return {"start_to_first_all_reduce_s": first_s, "seconds_per_all_reduce": max(seconds)}


def measure_local_cluster():
    from compat_distribute.testing import cluster

    c = cluster.local_cluster(2, timeout=120)
    start = time.perf_counter()
    try:
        c.start()
        firsts = c.run(cluster_all_reduce_once)
        first_s = time.perf_counter() - start
        assert firsts == [2.0, 2.0], firsts
        warm = []
        for _ in range(WARM_RUNS):
            t = time.perf_counter()
            c.run(noop)
            warm.append(time.perf_counter() - t)
        per_call = []
        for _ in range(TIMED_ALL_REDUCES):
            t = time.perf_counter()
            c.run(cluster_all_reduce_once)
            per_call.append(time.perf_counter() - t)
        in_worker = max(c.run(cluster_seconds_per_all_reduce, TIMED_ALL_REDUCES))
    finally:
        c.stop()
    return {
        "start_to_first_all_reduce_s": first_s,
        "warm_run_s": statistics.median(warm),
        "run_all_reduce_s": statistics.median(per_call),
        "seconds_per_all_reduce": in_worker,
    }


def _ratio(candidate, baseline):
    return {"candidate_s": candidate, "baseline_s": baseline, "ratio": candidate / baseline}


def main():
    local, by_hand = [], []
    for i in range(REPEATS):  # Alternate, so drifting load hits both sides.
        order = [(measure_local_cluster, local), (measure_by_hand, by_hand)]
        for measure, out in order if i % 2 == 0 else reversed(order):
            out.append(measure())

    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    start_ratio = _ratio(
        med(local, "start_to_first_all_reduce_s"), med(by_hand, "start_to_first_all_reduce_s")
    )
    # A warm run() of one all-reduce against the all-reduce alone, in raw TF.
    call_ratio = _ratio(med(local, "run_all_reduce_s"), med(by_hand, "seconds_per_all_reduce"))
    # Inside the workers the all-reduce is TF's either way: this should be ~1.
    inner_ratio = _ratio(
        med(local, "seconds_per_all_reduce"), med(by_hand, "seconds_per_all_reduce")
    )
    warm_run_s = med(local, "warm_run_s")
    rows = {
        "start to first all-reduce (2 workers): local_cluster / by hand": start_ratio,
        "1e6-float all-reduce: local_cluster.run / raw TF in-process": call_ratio,
        "1e6-float all-reduce inside workers: local_cluster / by hand": inner_ratio,
        "warm run(noop) on 2 workers (s)": warm_run_s,
        "local_cluster runs": local,
        "by-hand runs": by_hand,
    }
    table = [
        {
            "measure": "local_cluster: start to first all-reduce, 2 workers",
            "value": f"{start_ratio['candidate_s']:.2f} s (by hand: {start_ratio['baseline_s']:.2f} s, "
            f"ratio {start_ratio['ratio']:.2f})",
            "target": "ratio <= 1.2",
        },
        {
            "measure": "local_cluster: warm run() of a no-op on 2 workers",
            "value": f"{warm_run_s * 1e3:.2f} ms",
            "target": "< 10 ms",
        },
        _common.table_row(
            "local_cluster.run of a 1e6-float all-reduce / the all-reduce in raw TF",
            call_ratio,
        ),
        _common.table_row(
            "1e6-float all-reduce inside local_cluster workers / hand-launched workers",
            inner_ratio,
            "~1.0",
        ),
    ]
    _common.report("cluster", rows, table)


if __name__ == "__main__":
    if sys.argv[1:] == ["--by-hand"]:
        by_hand_worker()
    else:
        main()
