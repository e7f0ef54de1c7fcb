"""Shared benchmark plumbing: interleaved side-by-side timing, machine info, JSON."""

import json
import os
import platform
import statistics
import sys
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def machine():
    import tensorflow as tf

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "gpus": len(tf.config.list_physical_devices("GPU")),
    }


def matmul_step(strategy, dataset, width):
    """The benchmarks' step (matmul, all-reduce, counter) on `strategy`, an iterator, the counter."""
    import tensorflow as tf

    with strategy.scope():
        w = tf.Variable(tf.eye(width) * 0.5)
        counter = tf.Variable(0, dtype=tf.int64, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def step(x):
        counter.assign_add(1)
        y = tf.matmul(x, w)
        return tf.distribute.get_replica_context().all_reduce("SUM", tf.reduce_sum(y))

    return step, iter(strategy.experimental_distribute_dataset(dataset)), counter


def compare(candidate, baseline, *, repeats=15, number=20, warmup=3):
    """Times two callables side by side, alternating, and returns medians and the ratio.

    Alternating the two within each repeat cancels drift (thermal, other load)
    that would bias two separate runs.
    """
    for _ in range(warmup):
        candidate()
        baseline()
    cand, base = [], []
    for i in range(repeats):
        pair = [(candidate, cand), (baseline, base)]
        if i % 2:
            pair.reverse()
        for fn, out in pair:
            start = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - start) / number)
    c, b = statistics.median(cand), statistics.median(base)
    return {
        "candidate_s": c,
        "baseline_s": b,
        "ratio": c / b,
        # Spread of the per-repeat ratios, each repeat's pair timed back to back.
        "ratio_min": min(x / y for x, y in zip(cand, base)),
        "ratio_max": max(x / y for x, y in zip(cand, base)),
    }


def spread(values):
    """min / median / max of repeated measurements, and their count."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def regression_inputs(strategy, replicas, batch, width):
    """Per-replica random inputs `x` (batch x width) and targets `y` (batch x 1), seeded."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(0)
    arrays = rng.rand(replicas, batch, width).astype("float32"), rng.rand(replicas, batch, 1).astype("float32")
    return tuple(
        strategy.experimental_distribute_values_from_function(
            lambda ctx, array=array: tf.constant(array[ctx.replica_id_in_sync_group])
        )
        for array in arrays
    )


def first_and_warm(call, warm_calls):
    """Times `call()` once, then `warm_calls` more; returns the first call's seconds,
    the warm calls' median, and the first and last results (as floats)."""
    start = time.perf_counter()
    first = float(call())
    first_s = time.perf_counter() - start
    warm, last = [], first
    for _ in range(warm_calls):
        start = time.perf_counter()
        last = float(call())
        warm.append(time.perf_counter() - start)
    return first_s, statistics.median(warm), first, last


def fresh_sample(script, args, timeout_s):
    """Runs `python script --sample *args` in a fresh process (with this package
    importable); returns the JSON object of its last line that is one."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    what = f"{os.path.basename(script)} --sample {' '.join(map(str, args))}"
    try:
        proc = subprocess.run(
            [sys.executable, os.path.abspath(script), "--sample", *map(str, args)],
            capture_output=True, text=True, timeout=timeout_s, env=env, check=False,
        )
    except subprocess.TimeoutExpired as timeout:
        raise RuntimeError(f"{what} took over {timeout_s} s") from timeout
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def kind_and_replicas_main(description, sample, main, *, repeats, replicas):
    """The command line of a benchmark whose samples are (kind, replica count) runs in
    fresh processes: `--repeats` and `--replicas` for `main(repeats, counts)`, and
    the child's `--sample KIND REPLICAS`, which prints `sample(kind, count)` as JSON."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--replicas", default=replicas)
    parser.add_argument("--sample", nargs=2, metavar=("KIND", "REPLICAS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample:
        print(json.dumps(sample(args.sample[0], int(args.sample[1]))), flush=True)
        from compat_distribute import _exit

        _exit.end_process(0)
    counts = [int(c) for c in args.replicas.split(",")]
    if args.repeats < 1 or args.repeats > 20:
        parser.error(f"--repeats must be 1 to 20; got {args.repeats}")
    if not counts or any(c < 2 or c % 2 or c > 256 for c in counts):
        parser.error(f"--replicas must be even counts from 2 to 256; got {args.replicas}")
    main(args.repeats, counts)


def table_row(measure, result, target=""):
    """A README row for a compare() result: the ratio and both absolute times."""
    spread = (
        f" [{result['ratio_min']:.2f}-{result['ratio_max']:.2f}]" if "ratio_min" in result else ""
    )
    value = (
        f"{result['ratio']:.3f}{spread} ({result['candidate_s'] * 1e6:,.0f} us vs "
        f"{result['baseline_s'] * 1e6:,.0f} us)"
    )
    return {"measure": measure, "value": value, "target": target}


def report(name, rows, table=()):
    """Prints `rows` ({label: compare() result or value}) and writes results/<name>.json.

    `table` holds the rows the README shows (see `table_row`).
    """
    os.makedirs(RESULTS, exist_ok=True)
    payload = {
        "benchmark": name,
        "machine": machine(),
        "results": rows,
        "table": list(table),
        "argv": sys.argv[1:],
    }
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
    print(f"{name}:")
    for label, r in rows.items():
        if isinstance(r, dict) and "ratio" in r:
            print(
                f"  {label:<52} ratio {r['ratio']:.3f}  "
                f"({r['candidate_s'] * 1e6:,.0f} us vs {r['baseline_s'] * 1e6:,.0f} us)"
            )
        else:
            print(f"  {label:<52} {r}")
    print(f"  -> {os.path.relpath(path)}")
    return payload


def tree_cpu_s():
    """CPU seconds (user + system) of this process, of its children it reaped, and of
    every live descendant: take it before and after a launch, and the difference is
    what the launch cost on every process it started (Linux; /proc)."""
    times = os.times()
    total = times.user + times.system + times.children_user + times.children_system
    ticks = os.sysconf("SC_CLK_TCK")
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # Gone meanwhile.
                continue
            # After the name: state, ppid, ...; utime and stime are fields 14, 15.
            parents.setdefault(int(fields[1]), []).append((int(name), fields))
    todo = [os.getpid()]
    while todo:
        for pid, fields in parents.get(todo.pop(), ()):
            total += (int(fields[11]) + int(fields[12])) / ticks
            todo.append(pid)
    return total


def with_zygote(on):
    """Sets $COMPAT_DISTRIBUTE_ZYGOTE for the next launches (see docs/clusters.md)."""
    os.environ["COMPAT_DISTRIBUTE_ZYGOTE"] = "1" if on else "0"
