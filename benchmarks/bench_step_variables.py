"""First call of a training step that makes its variables, on the fake v3-8.

8 replicas, per-replica batches of 4, the loss reduced with strategy.reduce:

- "Adam built": a Keras 3 Dense model, Adam built before the first step;
- "Adam in step": Adam's slots made in the first step's apply_gradients (made
  outside the one trace, which is traced once);
- "Adam in step, per_replica": the same on the fake's per-replica mode (a raw
  MirroredStrategy fails there: Keras 3 in its replica context, keras#19246);
- "accumulator": a linear model of tf.Variables whose gradients are summed into
  ON_READ variables made in the step from zeros of their shape (as Hugging
  Face's GradientAccumulator), all-reduced and applied by hand;
- "accumulator, per_replica": the same on the per-replica mode, which is what a
  step costs that falls back from the one trace (a variable made from the step's
  input runs per replica).

Each sample is a fresh process, timing the first call (traces + first run),
then the warm step (median of 20 calls), and counting the step's Python traces.

    PYTHONPATH=. python benchmarks/bench_step_variables.py [--repeats 3]
"""

import argparse
import json
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position

KINDS = ("Adam built", "Adam in step", "Adam in step, per_replica", "accumulator", "accumulator, per_replica")
# {kind: its baseline} for the ratios of first calls.
BASELINES = {"Adam in step": "Adam built", "Adam in step, per_replica": "Adam built",
             "accumulator, per_replica": "accumulator"}
LEARNING_RATE = 0.01
REPLICAS = 8
WIDTH = 64
BATCH = 4  # per replica
WARM_CALLS = 20
SAMPLE_TIMEOUT_S = 900


def sample(kind):
    """One fresh-process measurement (runs in the child): a dict of figures."""
    from compat_distribute.testing import devices

    devices.set_virtual_devices(REPLICAS)

    import keras
    import tensorflow as tf

    from compat_distribute import testing
    from compat_distribute.testing._fake_tpu import replicate

    strategy = testing.FakeTPUStrategy(testing.FakeTPUClusterResolver("v3-8"))
    mode = replicate.PER_REPLICA if kind.endswith("per_replica") else replicate.ONCE
    replicate.set_trace_mode(strategy, mode)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        if kind.startswith("Adam"):
            model = keras.Sequential([keras.layers.Dense(WIDTH, activation="relu"), keras.layers.Dense(1)])
            model.build((None, WIDTH))
            optimizer = keras.optimizers.Adam(LEARNING_RATE)
            if kind == "Adam built":
                optimizer.build(model.trainable_variables)
            weights, predict = model.trainable_variables, model
        else:
            weights = [tf.Variable(tf.zeros([WIDTH, 1])), tf.Variable(tf.zeros([1]))]

            def predict(x):
                return tf.matmul(x, weights[0]) + weights[1]

    xs, ys = _common.regression_inputs(strategy, REPLICAS, BATCH, WIDTH)
    traces, accumulators = [], []

    def accumulate(grads):
        """Sums `grads` into ON_READ variables made on the first call, then applies them."""
        if not accumulators:
            accumulators.extend(
                tf.Variable(
                    tf.zeros_like(g),
                    trainable=False,
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                )
                for g in grads
            )
        context = tf.distribute.get_replica_context()
        for accumulator, g, var in zip(accumulators, grads, weights):
            accumulator.assign_add(g)
            var.assign_sub(LEARNING_RATE * context.all_reduce("SUM", accumulator.value()))
            accumulator.assign(tf.zeros_like(g))

    def step(x, y):
        traces.append(1)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((predict(x) - y) ** 2) / REPLICAS
        grads = tape.gradient(loss, weights)
        if kind.startswith("accumulator"):
            accumulate(grads)
        else:
            optimizer.apply_gradients(zip(grads, weights))
        return loss

    @tf.function
    def train(x, y):
        return strategy.reduce("SUM", strategy.run(step, args=(x, y)), axis=None)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first_call, warm_step, first_loss, loss = _common.first_and_warm(
            lambda: train(xs, ys), WARM_CALLS
        )
    assert loss < first_loss, (first_loss, loss)
    return {
        "first_call_s": first_call,
        "warm_step_s": warm_step,
        "body_traces": len(traces),
        "function_traces": train.experimental_get_tracing_count(),
        "warnings": sorted({type(w.message).__name__ for w in caught}),
    }


def main(repeats):
    samples = {kind: [] for kind in KINDS}
    for _ in range(repeats):  # kinds interleaved within each repeat
        for kind in KINDS:
            samples[kind].append(_common.fresh_sample(__file__, [kind], SAMPLE_TIMEOUT_S))
            print(f"  {kind}: {samples[kind][-1]}", flush=True)
    rows, table = {}, []
    for kind in KINDS:
        rows[kind] = {
            "first_call_s": _common.spread([s["first_call_s"] for s in samples[kind]]),
            "warm_step_s": _common.spread([s["warm_step_s"] for s in samples[kind]]),
            "body_traces": sorted({s["body_traces"] for s in samples[kind]}),
            "function_traces": sorted({s["function_traces"] for s in samples[kind]}),
            "warnings": sorted({w for s in samples[kind] for w in s["warnings"]}),
        }
        row = rows[kind]
        first, warm = row["first_call_s"], row["warm_step_s"]
        value = f"{first['median']:.2f} s ({first['min']:.2f}-{first['max']:.2f})"
        if kind in BASELINES:
            ratio = first["median"] / rows[BASELINES[kind]]["first_call_s"]["median"]
            rows[f"{kind} first call / {BASELINES[kind]}"] = ratio
            value += f", {ratio:.2f}x {BASELINES[kind]}"
        table.append(
            {
                "measure": f"first call, {REPLICAS} replicas, {kind}; step traced "
                f"{row['body_traces']}, function {row['function_traces']}",
                "value": f"{value}; warm step {warm['median'] * 1e3:.1f} ms",
                "target": "",
            }
        )
    _common.report("step_variables", rows, table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sample", nargs=1, metavar="KIND", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample:
        print(json.dumps(sample(args.sample[0])), flush=True)
        from compat_distribute import _exit

        _exit.end_process(0)
    if args.repeats < 1 or args.repeats > 20:
        parser.error(f"--repeats must be 1 to 20; got {args.repeats}")
    main(args.repeats)
