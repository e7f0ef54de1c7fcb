"""The first calls of a one-trace step: the fake's inlined call against the alternatives tried.

The fake TPU calls the replicas' trace in the step's function, where TensorFlow
inlines N copies of it and optimises them (Grappler) at the step's first run.
Two alternatives were tried for what a test pays, which is mostly that first
call (docs/design.md, "The first call"):

- "no grappler": the replicas called as one `_noinline` function instantiated
  without Grappler (testing/_tf.calls_without_graph_optimizer, as a pod host's
  call is), for every call;
- "tiers": the first TIER_CALLS calls so, then a `_noinline` call optimised by
  Grappler, chosen in the step by a call counter (`tf.cond`).

Both are substituted here for `replicate.call_in_step`; the fake adopts neither.
The step is bench_trace's Keras training step. Each sample is a fresh process
(the device count is set before TensorFlow starts); the kinds alternate within
each repeat. Per call, wall and CPU seconds (the process's, all threads): the
first call (trace and first run), calls 2 to 5, and the warm step (median of
calls 6 to 25), and whether its losses equal the inlined call's exactly.

    PYTHONPATH=. python benchmarks/bench_first_call.py [--repeats 2] [--replicas 8,32]
"""

import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position
import bench_trace  # pylint: disable=wrong-import-position

KINDS = ("inlined", "no grappler", "tiers")
# Grappler's options for the whole process (tf.config.optimizer), the step unchanged:
# the meta optimizer off, or only the costly passes that the options reach.
PROCESS_OPTIONS = {
    "grappler off": {"disable_meta_optimizer": True},
    "costly passes off": {
        name: False
        for name in ("constant_folding", "remapping", "dependency_optimization",
                     "arithmetic_optimization", "layout_optimizer", "loop_optimization",
                     "shape_optimization")
    },
}
TIER_CALLS = 3
CALLS = 25
WARM_FROM = 5  # calls before this index are "first calls"
SAMPLE_TIMEOUT_S = 900


def _not_inlined(replicated):
    import tensorflow as tf

    return tf.function(replicated, autograph=False, experimental_attributes={"_noinline": True})


def without_grappler(replicated, inputs):
    from compat_distribute.testing import _tf

    with _tf.calls_without_graph_optimizer():
        return _not_inlined(replicated)(inputs)


_COUNTER = []  # the one step's call counter, made before it is traced (made in the
# trace, it would have tf.function trace the step twice)


def tiers(replicated, inputs):
    import tensorflow as tf

    count = _COUNTER[0].assign_add(1)
    optimized = _not_inlined(replicated).get_concrete_function(inputs)
    return tf.cond(
        count <= TIER_CALLS,
        lambda: without_grappler(replicated, inputs),
        lambda: optimized(inputs),
    )


def sample(kind, replicas):
    """One fresh-process measurement (runs in the child): a dict of figures."""
    from compat_distribute.testing import devices

    devices.set_virtual_devices(replicas)

    from compat_distribute import testing
    from compat_distribute.testing._fake_tpu import replicate

    if kind in PROCESS_OPTIONS:
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options(PROCESS_OPTIONS[kind])
    elif kind != "inlined":
        replicate.call_in_step = {"no grappler": without_grappler, "tiers": tiers}[kind]
    if kind == "tiers":
        import tensorflow as tf

        with tf.device("/cpu:0"):
            _COUNTER.append(tf.Variable(0, dtype=tf.int64, trainable=False))
    resolver = testing.FakeTPUClusterResolver(mesh_shape=(replicas // 2, 1, 1, 2))
    train, traces = bench_trace.training_step(testing.FakeTPUStrategy(resolver), replicas)
    wall, cpu, losses = [], [], []
    for _ in range(CALLS):
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        losses.append(float(train()))
        wall.append(time.perf_counter() - start_wall)
        cpu.append(time.process_time() - start_cpu)
    assert losses[-1] < losses[0], losses
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "losses": losses,
        "body_traces": len(traces),
    }


def run_sample(kind, replicas):
    return _common.fresh_sample(__file__, [kind, replicas], SAMPLE_TIMEOUT_S)


def _figures(samples):
    """Medians over the samples of: first call, calls 2-5 each, warm step; wall and CPU."""
    figures = {}
    for clock in ("wall_s", "cpu_s"):
        figures[f"first_call_{clock}"] = statistics.median(s[clock][0] for s in samples)
        for call in range(1, WARM_FROM):
            figures[f"call_{call + 1}_{clock}"] = statistics.median(s[clock][call] for s in samples)
        figures[f"warm_step_{clock}"] = statistics.median(
            statistics.median(s[clock][WARM_FROM:]) for s in samples
        )
    figures["first_five_cpu_s"] = statistics.median(sum(s["cpu_s"][:WARM_FROM]) for s in samples)
    figures["n"] = len(samples)
    return figures


def main(repeats, replica_counts, kinds=KINDS, name="first_call"):
    """Writes results/<name>.json: each of `kinds` against the first."""
    rows, table = {}, []
    for replicas in replica_counts:
        samples = {kind: [] for kind in kinds}
        for repeat in range(repeats):
            order = kinds if repeat % 2 == 0 else kinds[::-1]
            for kind in order:
                samples[kind].append(run_sample(kind, replicas))
                got = samples[kind][-1]
                print(f"  {kind} x{replicas}: first {got['wall_s'][0]:.2f} s "
                      f"(CPU {got['cpu_s'][0]:.2f} s), warm "
                      f"{statistics.median(got['cpu_s'][WARM_FROM:]) * 1e3:.1f} ms CPU", flush=True)
        base = _figures(samples["inlined"])
        rows[f"inlined x{replicas}"] = base
        for kind in kinds[1:]:
            figures = _figures(samples[kind])
            rows[f"{kind} x{replicas}"] = figures
            ratio = {key: figures[key] / base[key] for key in base if key != "n"}
            rows[f"{kind} / inlined x{replicas}"] = ratio
            figures["largest_loss_difference"] = max(
                abs(a - b) / abs(b)
                for got in samples[kind]
                for a, b in zip(got["losses"], samples["inlined"][0]["losses"])
            )
            table.append(
                {
                    "measure": f"first calls, {kind} / the fake's inlined call, {replicas} replicas "
                    f"(CPU; wall)",
                    "value": f"first call {ratio['first_call_cpu_s']:.2f}; {ratio['first_call_wall_s']:.2f} "
                    f"({figures['first_call_cpu_s']:.2f} s vs {base['first_call_cpu_s']:.2f} s CPU); "
                    f"call {TIER_CALLS + 1} {ratio[f'call_{TIER_CALLS + 1}_cpu_s']:.2f}; "
                    f"{ratio[f'call_{TIER_CALLS + 1}_wall_s']:.2f}; first five calls "
                    f"{ratio['first_five_cpu_s']:.2f} (CPU); losses "
                    + ("the same" if not figures["largest_loss_difference"] else
                       f"differ by up to {figures['largest_loss_difference']:.1e} (relative)"),
                    "target": "first call < 1",
                }
            )
            table.append(
                {
                    "measure": f"warm step (calls 6-25), {kind} / the fake's inlined call, "
                    f"{replicas} replicas (CPU; wall)",
                    "value": f"{ratio['warm_step_cpu_s']:.2f}; {ratio['warm_step_wall_s']:.2f} "
                    f"({figures['warm_step_cpu_s'] * 1e3:.1f} ms vs {base['warm_step_cpu_s'] * 1e3:.1f} ms CPU)",
                    "target": "<= 1.05",
                }
            )
    _common.report(name, rows, table)


if __name__ == "__main__":
    _common.kind_and_replicas_main(
        __doc__.splitlines()[0], sample, main, repeats=2, replicas="8,32"
    )
