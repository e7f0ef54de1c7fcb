"""local_cluster's cost: start-up, a warm `run`, and a 1e6-float all-reduce on 2
workers against the same all-reduce in raw TensorFlow, launched by hand with
subprocess and TF_CONFIG; and how soon a worker killed in an all-reduce is
reported (the error, with every task's stack, raised here).

Both sides are measured in the same run on the same machine. Start-up is timed
over alternating cold starts, in wall time and in CPU time summed over this
process and every process the start launched; local_cluster starts once with
its tasks forked from one zygote (the default) and once as fresh processes
(COMPAT_DISTRIBUTE_ZYGOTE=0). The all-reduce is timed with both clusters up at
once, in alternating batches (one cluster idles while the other is timed), so
that drifting load on the machine hits both sides alike; a local_cluster on
the host network is a third side, to show what the private network costs.

With `--against ROOT` (a checkout of the package, e.g. the main branch), the
start-up and the fault report are also timed with that package, each in a
fresh process, alternating with this tree's, and given as ratios.

`python benchmarks/bench_cluster.py [--rounds N] [--cold-starts N] [--faults N] [--against ROOT]`.
"""

import argparse
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
WARM_RUNS = 30
ALL_REDUCES_PER_BATCH = 20

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
    """(median wall seconds, CPU seconds of this process) per all-reduce.

    CPU time, all threads of the process, hardly moves with other load on the
    machine: it shows whether a worker does more work, where wall time is noisy.
    """
    step = _all_reduce_step(strategy)
    step()  # Traced and warm.
    times = []
    cpu = time.process_time()
    for _ in range(reps):
        start = time.perf_counter()
        step().numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times), (time.process_time() - cpu) / reps


# Run through local_cluster (the module is imported by name in each worker).


def cluster_all_reduce_once():
    from compat_distribute.testing import cluster

    return _one_all_reduce(cluster.worker_strategy())


def cluster_seconds_per_all_reduce(reps):
    from compat_distribute.testing import cluster

    return _seconds_per_all_reduce(cluster.worker_strategy(), reps)


def noop():
    return None


def kill_worker_1_in_an_all_reduce(before_s):
    """Worker 1 dies (SIGKILL) `before_s` seconds into the call, without joining
    the all-reduce in which worker 0 waits for it."""
    import signal

    from compat_distribute.testing import cluster

    strategy = cluster.worker_strategy()
    if cluster.current_task() == ("worker", 1):
        time.sleep(before_s)
        os.kill(os.getpid(), signal.SIGKILL)
    return _one_all_reduce(strategy)


# Launched by hand: `python bench_cluster.py --by-hand` with TF_CONFIG set. It
# answers each line "N" on stdin with the median seconds of N all-reduces.


def by_hand_worker():
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print(json.dumps(_one_all_reduce(strategy)), flush=True)
    for line in sys.stdin:
        print(json.dumps(_seconds_per_all_reduce(strategy, int(line))), flush=True)


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


def _both_workers(answers):
    """(wall: the slower worker's, CPU: the sum of both) per all-reduce."""
    return max(wall for wall, _ in answers), sum(cpu for _, cpu in answers)


class ByHand:
    """What one writes without local_cluster: TF_CONFIG per process, Popen, read."""

    def __init__(self):
        addresses = [f"127.0.0.1:{p}" for p in _free_ports(2)]
        start = time.perf_counter()
        self.procs = []
        for index in range(2):
            tf_config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
            env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), TF_CPP_MIN_LOG_LEVEL="2")
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--by-hand"],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
        firsts = self._read()
        self.start_s = time.perf_counter() - start
        assert firsts == [2.0, 2.0], firsts

    def _read(self):
        return [json.loads(p.stdout.readline()) for p in self.procs]

    def seconds_per_all_reduce(self, reps):
        for p in self.procs:
            p.stdin.write(f"{reps}\n")
            p.stdin.flush()
        return _both_workers(self._read())

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()
            p.stdin.close()
            p.stdout.close()


class ThroughLocalCluster:
    def __init__(self, network, zygote=True):
        from compat_distribute.testing import cluster

        self.cluster = cluster.local_cluster(2, timeout=120, network=network)
        _common.with_zygote(zygote)
        cpu = _common.tree_cpu_s()
        start = time.perf_counter()
        self.cluster.start()
        firsts = self.cluster.run(cluster_all_reduce_once)
        self.start_s = time.perf_counter() - start
        self.start_cpu_s = _common.tree_cpu_s() - cpu
        _common.with_zygote(True)
        assert firsts == [2.0, 2.0], firsts

    def seconds_per_all_reduce(self, reps):
        return _both_workers(self.cluster.run(cluster_seconds_per_all_reduce, reps))

    def warm_run_s(self):
        times = []
        for _ in range(WARM_RUNS):
            t = time.perf_counter()
            self.cluster.run(noop)
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    def run_all_reduce_s(self):
        times = []
        for _ in range(ALL_REDUCES_PER_BATCH):
            t = time.perf_counter()
            self.cluster.run(cluster_all_reduce_once)
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    def stop(self):
        self.cluster.stop()


def _ratio(candidate, baseline):
    return {"candidate_s": candidate, "baseline_s": baseline, "ratio": candidate / baseline}


_FRESH = "local_cluster, fresh processes"


def _cold_starts(count):
    """Start-up to the first all-reduce, alternating sides: ({side: [s, ...]},
    {side: [CPU s, ...]}) for the local_cluster sides."""
    starts = {"local_cluster": [], _FRESH: [], "by hand": []}
    cpu = {"local_cluster": [], _FRESH: []}
    for i in range(count):
        order = [
            ("local_cluster", lambda: ThroughLocalCluster("auto")),
            (_FRESH, lambda: ThroughLocalCluster("auto", zygote=False)),
            ("by hand", ByHand),
        ]
        for side, make in order if i % 2 == 0 else reversed(order):
            launched = make()
            launched.stop()
            starts[side].append(launched.start_s)
            if side in cpu:
                cpu[side].append(launched.start_cpu_s)
    return starts, cpu


# Worker 1 dies at once, or once worker 0 waits in the all-reduce (it cannot
# answer: the cluster waits out its grace period, then stops it).
_KILLED_AFTER_S = {"fault": 0.0, "fault, peer waiting": 1.0}


def _one_fault_report(kind="fault"):
    """Seconds from run() to the ClusterTaskError naming worker 1, killed
    (`_KILLED_AFTER_S[kind]`) while worker 0 runs an all-reduce with it (the
    strategy built and warm), the tasks stopped."""
    from compat_distribute.testing import cluster

    launched = cluster.local_cluster(2, timeout=120).start()
    try:
        assert launched.run(cluster_all_reduce_once) == [2.0, 2.0]
        start = time.perf_counter()
        try:
            launched.run(kill_worker_1_in_an_all_reduce, _KILLED_AFTER_S[kind])
        except cluster.ClusterTaskError as error:
            seconds = time.perf_counter() - start
            assert (error.task_id, error.exitcode) == (1, -9), str(error)
            assert "Python stacks of worker 0:" in str(error), str(error)
            return seconds
        raise AssertionError("the killed worker was not reported")
    finally:
        launched.stop()


def _one_start():
    """Seconds from local_cluster(2).start() to the first all-reduce's result."""
    launched = ThroughLocalCluster("auto")
    launched.stop()
    return launched.start_s


_ONCE = {
    "start": _one_start,
    "fault": _one_fault_report,
    "fault, peer waiting": lambda: _one_fault_report("fault, peer waiting"),
}


def _once_in(root, what):
    """`_ONCE[what]()` in a fresh process that imports the package from `root`."""
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--once", what],
        env=dict(os.environ, PYTHONPATH=root),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _against(root, count):
    """{what: {"this tree": [s, ...], root: [s, ...]}}, the two alternating."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    timed = {what: {"this tree": [], root: []} for what in _ONCE}
    for i in range(count):
        for what in _ONCE:
            sides = [("this tree", here), (root, root)]
            for side, path in sides if i % 2 == 0 else reversed(sides):
                timed[what][side].append(_once_in(path, what))
    return timed


def _interleaved(rounds):
    """Median seconds per all-reduce of each side, all up at once, in turns."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "auto" on a host network
        sides = {
            "by hand": ByHand(),
            "local_cluster": ThroughLocalCluster("auto"),
            "local_cluster, host network": ThroughLocalCluster("host"),
        }
    try:
        network = sides["local_cluster"].cluster.network
        batches = {side: [] for side in sides}
        for r in range(rounds):
            names = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in names:
                batches[side].append(sides[side].seconds_per_all_reduce(ALL_REDUCES_PER_BATCH))
        through_run = sides["local_cluster"]
        return network, batches, through_run.warm_run_s(), through_run.run_all_reduce_s()
    finally:
        for launched in sides.values():
            launched.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10, help="timed batches per side")
    parser.add_argument("--cold-starts", type=int, default=2, help="cold starts per side")
    parser.add_argument("--faults", type=int, default=3, help="killed workers reported")
    parser.add_argument("--against", metavar="ROOT", help="a checkout of the package to compare")
    parser.add_argument("--once", choices=sorted(_ONCE), help=argparse.SUPPRESS)
    flags = parser.parse_args()
    if flags.once:
        print(json.dumps(_ONCE[flags.once]()))
        return

    starts, start_cpu = _cold_starts(flags.cold_starts)
    faults = {kind: [_one_fault_report(kind) for _ in range(flags.faults)] for kind in _KILLED_AFTER_S}
    against = _against(flags.against, flags.faults) if flags.against else None
    network, batches, warm_run_s, run_all_reduce_s = _interleaved(flags.rounds)
    per_all_reduce = {side: statistics.median(w for w, _ in b) for side, b in batches.items()}
    cpu_per_all_reduce = {side: statistics.median(c for _, c in b) for side, b in batches.items()}
    start_ratio = _ratio(
        statistics.median(starts["local_cluster"]), statistics.median(starts["by hand"])
    )
    inner_ratio = _ratio(per_all_reduce["local_cluster"], per_all_reduce["by hand"])
    host_ratio = _ratio(per_all_reduce["local_cluster, host network"], per_all_reduce["by hand"])
    cpu_ratio = _ratio(cpu_per_all_reduce["local_cluster"], cpu_per_all_reduce["by hand"])
    # A warm run() of one all-reduce against the all-reduce alone, in raw TF.
    call_ratio = _ratio(run_all_reduce_s, per_all_reduce["by hand"])
    zygote_ratio = _ratio(
        statistics.median(starts["local_cluster"]), statistics.median(starts[_FRESH])
    )
    zygote_cpu_ratio = _ratio(
        statistics.median(start_cpu["local_cluster"]), statistics.median(start_cpu[_FRESH])
    )
    rows = {
        "start to first all-reduce (2 workers): local_cluster / by hand": start_ratio,
        "start to first all-reduce (2 workers): zygote / fresh processes": zygote_ratio,
        "CPU of every process, start to first all-reduce: zygote / fresh processes": (
            zygote_cpu_ratio
        ),
        "start-up CPU (s)": start_cpu,
        "1e6-float all-reduce: local_cluster.run / raw TF in-process": call_ratio,
        "1e6-float all-reduce inside workers: local_cluster / by hand": inner_ratio,
        "1e6-float all-reduce inside workers: local_cluster on the host network / by hand": host_ratio,
        "CPU of both workers per all-reduce: local_cluster / by hand": cpu_ratio,
        "local_cluster network": network,
        "warm run(noop) on 2 workers (s)": warm_run_s,
        "cold starts (s)": starts,
        "worker killed in an all-reduce, run() to the error (s)": faults,
        "fresh processes, this tree and --against (s)": against,
        "(wall, CPU) seconds per all-reduce, per batch": batches,
    }
    table = [
        {
            "measure": "local_cluster: start to first all-reduce, 2 workers",
            "value": f"{start_ratio['candidate_s']:.2f} s (by hand: {start_ratio['baseline_s']:.2f} s, "
            f"ratio {start_ratio['ratio']:.2f})",
            "target": "ratio <= 1.2",
        },
        {
            "measure": "local_cluster: start to first all-reduce, tasks forked by a zygote / "
            "fresh processes (COMPAT_DISTRIBUTE_ZYGOTE=0)",
            "value": f"wall {zygote_ratio['candidate_s']:.2f} s / "
            f"{zygote_ratio['baseline_s']:.2f} s; "
            f"CPU of every process {zygote_cpu_ratio['candidate_s']:.2f} s / "
            f"{zygote_cpu_ratio['baseline_s']:.2f} s (ratio {zygote_cpu_ratio['ratio']:.2f})",
            "target": "CPU ratio < 1",
        },
        *(
            {
                "measure": f"local_cluster: a worker killed in an all-reduce ({kind}), run() "
                f"to the error naming it with every task's stack",
                "value": f"{statistics.median(seconds):.2f} s (median of {len(seconds)}; "
                f"{min(seconds):.2f}-{max(seconds):.2f} s)",
                "target": "<= 4.5 s",
            }
            for kind, seconds in faults.items()
        ),
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
            f"1e6-float all-reduce inside local_cluster workers ({network} network) / "
            f"hand-launched workers",
            inner_ratio,
            "<= 1.05",
        ),
        _common.table_row(
            "CPU of both workers per 1e6-float all-reduce: local_cluster / hand-launched",
            cpu_ratio,
            "<= 1.05",
        ),
        _common.table_row(
            "1e6-float all-reduce inside local_cluster workers (host network) / "
            "hand-launched workers",
            host_ratio,
            "<= 1.05",
        ),
    ]
    if against is not None:
        for what in _ONCE:
            measure = f"local_cluster: {what}" if what != "start" else "local_cluster: start"
            ratio = _ratio(
                statistics.median(against[what]["this tree"]),
                statistics.median(against[what][flags.against]),
            )
            rows[f"{measure} (s): this tree / {flags.against}"] = ratio
            table.append(
                {
                    "measure": f"{measure} (to the first all-reduce, or to the error): this "
                    f"tree / the package before (fresh processes, alternating)",
                    "value": f"{ratio['candidate_s']:.2f} s / {ratio['baseline_s']:.2f} s "
                    f"(ratio {ratio['ratio']:.2f})",
                    "target": "ratio <= 1.05 (the noise floor)",
                }
            )
    _common.report("cluster", rows, table)


if __name__ == "__main__":
    if sys.argv[1:] == ["--by-hand"]:
        by_hand_worker()
    else:
        main()
