"""First call of a real training step: one trace per step against a trace per replica.

A Dense model, Keras 3 SGD (momentum), gradients all-reduced by the optimizer,
the loss reduced with strategy.reduce; per-replica batches. For 8, 32 and 128
replicas, each of: the fake TPU tracing the step once ("once"), the fake
tracing it once per replica ("per_replica"), and a raw MirroredStrategy on the
same virtual CPUs. Each sample is a fresh process (the device count is set
before TensorFlow starts), timing the first call (trace + first run), then the
warm step (median of 20 calls), and counting how often the step's Python body
was traced. Figures are min / median / max over the repeats.

    PYTHONPATH=. python benchmarks/bench_trace.py [--repeats 3] [--replicas 8,32,128]
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position

KINDS = ("once", "per_replica", "mirrored")
WIDTH = 64
BATCH = 4  # per replica
WARM_CALLS = 20
SAMPLE_TIMEOUT_S = 900


def sample(kind, replicas):
    """One fresh-process measurement (runs in the child): a dict of figures."""
    from compat_distribute.testing import devices

    devices.set_virtual_devices(replicas)

    import tensorflow as tf

    from compat_distribute import testing
    from compat_distribute.testing._fake_tpu import replicate

    if kind == "mirrored":
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
    else:
        resolver = testing.FakeTPUClusterResolver(mesh_shape=(replicas // 2, 1, 1, 2))
        strategy = testing.FakeTPUStrategy(resolver)
        replicate.set_trace_mode(strategy, kind)
    train, traces = training_step(strategy, replicas)
    first_call, warm_step, first_loss, loss = _common.first_and_warm(train, WARM_CALLS)
    assert loss < first_loss, (first_loss, loss)
    return {
        "first_call_s": first_call,
        "warm_step_s": warm_step,
        "body_traces": len(traces),
        "last_loss": loss,
    }


def training_step(strategy, replicas):
    """The benchmarks' Keras training step on `strategy`: a no-argument callable
    returning the loss, and a list that grows by one at each trace of its body."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)  # the same weights in every kind: losses compare
    with strategy.scope():
        model = keras.Sequential(
            [keras.layers.Dense(WIDTH, activation="relu"), keras.layers.Dense(1)]
        )
        model.build((None, WIDTH))
        optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
        optimizer.build(model.trainable_variables)
    xs, ys = _common.regression_inputs(strategy, replicas, BATCH, WIDTH)
    traces = []

    def step(x, y):
        traces.append(1)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2) / replicas
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train(x, y):
        return strategy.reduce("SUM", strategy.run(step, args=(x, y)), axis=None)

    return lambda: train(xs, ys), traces


def run_sample(kind, replicas):
    return _common.fresh_sample(__file__, [kind, replicas], SAMPLE_TIMEOUT_S)


def main(repeats, replica_counts):
    rows = {}
    for replicas in replica_counts:
        samples = {kind: [] for kind in KINDS}
        for _ in range(repeats):  # kinds interleaved within each repeat
            for kind in KINDS:
                samples[kind].append(run_sample(kind, replicas))
                print(f"  {kind} x{replicas}: {samples[kind][-1]}", flush=True)
        for kind in KINDS:
            rows[f"{kind} x{replicas}"] = {
                "first_call_s": _common.spread([s["first_call_s"] for s in samples[kind]]),
                "warm_step_s": _common.spread([s["warm_step_s"] for s in samples[kind]]),
                "body_traces": sorted({s["body_traces"] for s in samples[kind]}),
            }
    table = []
    for kind in KINDS:
        for replicas in replica_counts:
            row = rows[f"{kind} x{replicas}"]
            first, warm = row["first_call_s"], row["warm_step_s"]
            table.append(
                {
                    "measure": f"first call (trace + first run), {kind}, {replicas} replicas, "
                    f"body traced {row['body_traces']}",
                    "value": f"{first['median']:.2f} s ({first['min']:.2f}-{first['max']:.2f}); "
                    f"warm step {warm['median'] * 1e3:.1f} ms",
                    "target": "",
                }
            )
        base = rows.get(f"{kind} x{replica_counts[0]}")
        for replicas in replica_counts[1:]:
            ratio = (
                rows[f"{kind} x{replicas}"]["first_call_s"]["median"] / base["first_call_s"]["median"]
            )
            rows[f"{kind} first call x{replicas} / x{replica_counts[0]}"] = ratio
            target = {32: "<= 1.5", 128: "<= 2.5"}.get(replicas, "") if kind == "once" else ""
            table.append(
                {
                    "measure": f"first call at {replicas} / at {replica_counts[0]} replicas, {kind}",
                    "value": f"{ratio:.2f}",
                    "target": target,
                }
            )
    _common.report("trace", rows, table)


if __name__ == "__main__":
    _common.kind_and_replicas_main(
        __doc__.splitlines()[0], sample, main, repeats=3, replicas="8,32,128"
    )
