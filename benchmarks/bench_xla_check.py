"""Cost of the TPU compatibility check against tracing and stepping.

Strict mode checks a step once, when it is first traced, so its price is paid
at the first trace and a warm step should cost the same with or without it.
This measures, for a small training step (dense layer, gradient, all-reduce,
SGD update with assign_sub):

  first_trace_s      tracing + first run of the plain tf.function step
  check_s            check_tpu_compatible (trace + walk + XLA compile)
  check_graph_s      check_graph on the already traced function (what a
                     strategy that traced the step itself pays)
  walk_s             the walk alone (check_graph without compiling), and
                     walk_ops_per_s: ops tested against the rule table a second
  warm_step_s        median warm step, plain
  warm_step_checked_s  median warm step through a wrapper that checked at
                     first trace (strict mode)

and writes them, with ratios, to benchmarks/results/xla_check.json.

`measure(make_step, make_args, strategy=...)` is reusable: pass any step
factory (e.g. one running on a fake TPU strategy) to get the same numbers.

Usage: python benchmarks/bench_xla_check.py [--warm-steps N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=g-import-not-at-top
import tensorflow as tf

from compat_distribute import testing  # pylint: disable=g-import-not-at-top

FAKE_TPU_CORES = 4
testing.set_virtual_devices(FAKE_TPU_CORES)  # pylint: disable=g-import-not-at-top

from compat_distribute.testing import xla_check  # pylint: disable=g-import-not-at-top
from compat_distribute.testing.xla_check import kernels, walker  # pylint: disable=g-import-not-at-top

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "xla_check.json")


def training_step_factory(strategy, width=64, batch=32):
    """A fresh (variables, step, args) for a dense-layer SGD step."""
    with strategy.scope():
        kernel = tf.Variable(tf.random.normal([width, width], seed=1) * 0.05)
        bias = tf.Variable(tf.zeros([width]))

    def train_step(x):
        with tf.GradientTape() as tape:
            y = tf.nn.relu(tf.matmul(x, kernel) + bias)
            loss = tf.reduce_mean(tf.square(y))
        grads = tape.gradient(loss, [kernel, bias])
        grads = tf.distribute.get_replica_context().all_reduce("mean", grads)
        kernel.assign_sub(0.01 * grads[0])
        bias.assign_sub(0.01 * grads[1])
        return loss

    x = tf.random.normal([batch, width], seed=2)
    return train_step, (x,)


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def _ops_in(graph):
    """Ops in `graph` and in every function it calls, as the walk visits them."""
    walk = walker.Walker()
    walk.walk_graph(graph)
    return len(walk.ops)


def _warm_medians(calls, steps):
    """Median time of each call; calls alternate so drift hits all alike."""
    for call in calls:
        for _ in range(3):
            call()
    times = [[] for _ in calls]
    for _ in range(steps):
        for call, sink in zip(calls, times):
            start = time.perf_counter()
            call()
            sink.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def measure(make_step, strategy, warm_steps=50):
    """Times tracing, the check and warm steps for `make_step(strategy)`.

    Args:
      make_step: `strategy -> (step_fn, args)`; called once per measurement so
        every measurement traces a fresh function.
      strategy: the strategy whose `run` executes the step.
      warm_steps: warm steps timed for each median.

    Returns:
      A dict of seconds and ratios (see module docstring).
    """

    def runner(step):
        return tf.function(lambda *a: strategy.run(step, args=a))

    # Plain: first trace (trace + run) and warm steps.
    step, args = make_step(strategy)
    plain = runner(step)
    first_trace_s, _ = _timed(lambda: plain(*args))
    plain_args = args

    # The check on its own, as check_tpu_compatible runs it.
    step, args = make_step(strategy)
    check_s, report = _timed(lambda: xla_check.check_tpu_compatible(step, *args, strategy=strategy))
    assert report.ok, str(report)

    # Strict mode: check the traced function once, at its first trace.
    step, args = make_step(strategy)
    checked = runner(step)
    specs = [tf.TensorSpec.from_tensor(a) for a in args]
    first_trace_checked_s, _ = _timed(
        lambda: (
            xla_check.ensure_graph_compatible(checked.get_concrete_function(*specs)),
            checked(*args),
        )
    )
    check_graph_s, _ = _timed(lambda: xla_check.check_graph(checked.get_concrete_function(*specs)))
    graph = checked.get_concrete_function(*specs).graph
    walk_s, _ = _timed(lambda: xla_check.check_graph(graph, compile_ops=False))
    warm_step_s, warm_step_checked_s = _warm_medians(
        [lambda: plain(*plain_args), lambda: checked(*args)], warm_steps
    )

    return {
        "replicas": strategy.num_replicas_in_sync,
        "first_trace_s": first_trace_s,
        "first_trace_checked_s": first_trace_checked_s,
        "check_s": check_s,
        "check_graph_s": check_graph_s,
        "walk_s": walk_s,
        "walk_ops_per_s": _ops_in(graph) / walk_s,
        "warm_step_s": warm_step_s,
        "warm_step_checked_s": warm_step_checked_s,
        "check_over_first_trace": check_s / first_trace_s,
        "check_graph_over_first_trace": check_graph_s / first_trace_s,
        "warm_step_overhead": warm_step_checked_s / warm_step_s - 1.0,
        "check_in_warm_steps": check_s / warm_step_s,
    }


def fake_tpu_strict(warm_steps):
    """Strict against lenient fake TPU (v4-8): first trace, and a warm step."""
    strategies = {
        name: testing.FakeTPUStrategy(testing.FakeTPUClusterResolver("v4-8", strict=strict))
        for name, strict in (("strict", True), ("lenient", False))
    }
    x = tf.random.normal([FAKE_TPU_CORES * 8, 64], seed=2)
    steps, first = {}, {}
    # Alternate which one traces first, twice, so warm-up is not billed to one side.
    for order in (("strict", "lenient"), ("lenient", "strict")):
        for name in order:
            strategy = strategies[name]
            replica_step, _ = training_step_factory(strategy)
            step = tf.function(lambda x, s=strategy, f=replica_step: s.run(f, args=(x,)))
            first.setdefault(name, []).append(_timed(lambda: step(x))[0])
            steps[name] = step
    warm_strict, warm_lenient = _warm_medians(
        [lambda: steps["strict"](x), lambda: steps["lenient"](x)], warm_steps
    )
    return {
        "first_trace_strict_s": statistics.median(first["strict"]),
        "first_trace_lenient_s": statistics.median(first["lenient"]),
        "first_trace_ratio": statistics.median(first["strict"])
        / statistics.median(first["lenient"]),
        "warm_step_strict_s": warm_strict,
        "warm_step_lenient_s": warm_lenient,
        "warm_step_ratio": warm_strict / warm_lenient,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-steps", type=int, default=300)
    parser.add_argument("--out", default=RESULTS)
    options = parser.parse_args(argv)

    # The kernel table fills at the first XLA compile of the process; time it
    # apart so it is not billed to one case.
    table_s, _ = _timed(kernels.table)
    # One throwaway trace so the first case does not pay TF's own warm-up.
    measure(training_step_factory, tf.distribute.get_strategy(), 5)

    cases = {
        "default_strategy": tf.distribute.get_strategy(),
        "mirrored_one_cpu": tf.distribute.MirroredStrategy(["/cpu:0"]),
    }
    results = {
        name: measure(training_step_factory, strategy, options.warm_steps)
        for name, strategy in cases.items()
    }
    worst = max(r["warm_step_overhead"] for r in results.values())
    payload = {
        "benchmark": "xla_check",
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "warm_steps": options.warm_steps,
        "kernel_table_first_fill_s": table_s,
        "cases": results,
        # Strict is worth on by default when a warm step costs <= 10% more.
        "strict_default_ok": worst <= 0.10,
        "machine": _common.machine(),
    }
    fake = fake_tpu_strict(options.warm_steps)
    payload["fake_tpu_strict"] = fake
    payload["strict_default_ok"] = payload["strict_default_ok"] and fake["warm_step_ratio"] <= 1.10
    mirrored = results["mirrored_one_cpu"]
    payload["table"] = [
        {
            "measure": "fake TPU strict / lenient: warm step (v4-8)",
            "value": f"{fake['warm_step_ratio']:.3f}",
            "target": "<= 1.10 to be on by default",
        },
        {
            "measure": "fake TPU strict / lenient: first trace (v4-8)",
            "value": f"{fake['first_trace_ratio']:.2f}",
            "target": "",
        },
        {
            "measure": "strict mode: warm step checked / unchecked (MirroredStrategy)",
            "value": f"{1 + mirrored['warm_step_overhead']:.3f}",
            "target": "<= 1.10 to be on by default",
        },
        {
            "measure": "strict mode: first trace + check / first trace",
            "value": f"{mirrored['first_trace_checked_s'] / mirrored['first_trace_s']:.2f}",
            "target": "",
        },
        {
            "measure": "walk: ops tested against the rule table per second",
            "value": f"{mirrored['walk_ops_per_s']:.0f}",
            "target": "",
        },
        {
            "measure": "check_tpu_compatible (trace + walk + compile), seconds",
            "value": f"{mirrored['check_s']:.3f}",
            "target": "",
        },
    ]
    os.makedirs(os.path.dirname(options.out), exist_ok=True)
    with open(options.out, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
    json.dump(payload, sys.stdout, indent=2, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
