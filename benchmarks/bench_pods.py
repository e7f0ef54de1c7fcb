"""Fake TPU pods' cost, timed on a real training step.

The step is what users run: a two-layer Dense model, a Keras SGD optimizer,
gradients all-reduced over every replica, the loss reduced to one value; a
per-replica batch of 8, so the global batch grows with the replicas, as on a
TPU. It runs 1 and 10 steps a call (a `tf.range` loop inside the function).
A v3-32 pod (4 host processes) is timed against a one-host v3-8 and against
the same 32 replicas in this process (`hosts=1`), side by side, alternating
(`_common.compare`), and by CPU time a step summed over every process the step
runs in (this one, the pod's hosts and relay), the three taken in turn. Extra rows: the variable-free step of earlier rounds (a
matmul of constants, one scalar all-reduced; labelled as such), start-up of
the hosts to the first all-reduce over cold starts (wall time, and CPU time
summed over this process and every process the start launched; hosts forked
from one zygote, the default, alternating with hosts as fresh processes,
COMPAT_DISTRIBUTE_ZYGOTE=0), the hosts' memory, and an 8-host pod
(v5litepod-32) against its own `hosts=1` twin. Keras 3 `fit` of the same model: its first
step (trace and first run, timed by Keras' batch callbacks) and its first `fit` call on a
fresh model, v3-32 pod and v3-8 in turn, and warm 10-step epochs side by side; and the pod's
step traced once (the default) against traced per replica.

`python benchmarks/bench_pods.py [--cold-starts N] [--repeats N] [--first-fits N] [--no-eight-hosts]`.
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
EIGHT_HOSTS = "v5litepod-32"
FEATURES = 64
PER_REPLICA_BATCH = 8


def _training_step(strategy, steps_per_call):
    """A callable running `steps_per_call` training steps; returns the last loss."""
    import keras
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((FEATURES,)),
                keras.layers.Dense(FEATURES, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        optimizer = keras.optimizers.SGD(0.01)
    features = tf.random.stateless_uniform([PER_REPLICA_BATCH * replicas, FEATURES], seed=(1, 2))
    labels = tf.reduce_sum(features, axis=1, keepdims=True)
    dataset = (
        tf.data.Dataset.from_tensors((features, labels)).unbatch().repeat()
        .batch(PER_REPLICA_BATCH * replicas, drop_remainder=True)
    )
    iterator = iter(strategy.experimental_distribute_dataset(dataset))

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y)) / replicas
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train(iterator):
        loss = tf.constant(0.0)
        for _ in tf.range(steps_per_call):
            loss = strategy.reduce("SUM", strategy.run(replica_step, args=next(iterator)), axis=None)
        return loss

    return lambda: train(iterator).numpy()


def _keras_model(strategy):
    """The training step's model, compiled for Keras 3 `fit` under `strategy`."""
    import keras

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((FEATURES,)),
                keras.layers.Dense(FEATURES, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


def _keras_data(strategy):
    import tensorflow as tf

    batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync
    features = tf.random.stateless_uniform([batch, FEATURES], seed=(1, 2))
    labels = tf.reduce_sum(features, axis=1, keepdims=True)
    return tf.data.Dataset.from_tensors((features, labels)).repeat()


def _batch_timer():
    """A Keras callback that keeps each training step's seconds in `took` (Keras' batch
    callbacks enclose the step's call)."""
    import keras

    class BatchTimer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.took.append(time.perf_counter() - self.started)

    timer = BatchTimer()
    timer.took = []
    return timer


def _keras_first_fit(strategy):
    """Seconds of a fresh model's first `fit` step (trace and first run) and of its
    whole first `fit` call of one step (which also makes the per-core input iterators)."""
    model = _keras_model(strategy)
    timer = _batch_timer()
    start = time.perf_counter()
    model.fit(_keras_data(strategy), steps_per_epoch=1, epochs=1, verbose=0, callbacks=[timer])
    return timer.took[0], time.perf_counter() - start


def _keras_warm_steps(strategies, repeats, steps=10):
    """{name: median seconds of a warm `fit` step}: one model each, an epoch of `steps`
    steps each in turn (after one warm-up epoch); the first step of an epoch is left
    out (it waits on the epoch's new input iterator)."""
    fits = {}
    for name, strategy in strategies.items():
        model, data = _keras_model(strategy), _keras_data(strategy)
        model.fit(data, steps_per_epoch=2, epochs=1, verbose=0)
        fits[name] = (model, data)
    took = {name: [] for name in strategies}
    order = list(strategies)
    for i in range(repeats):
        for name in order if i % 2 == 0 else order[::-1]:
            model, data = fits[name]
            timer = _batch_timer()
            model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[timer])
            took[name] += timer.took[1:]
    return {name: statistics.median(t) for name, t in took.items()}


def _first_fits(strategies, samples):
    """{name: [(first step s, first fit s), ...]}, the strategies taken in turn."""
    firsts = {name: [] for name in strategies}
    order = list(strategies)
    for i in range(samples):
        for name in order if i % 2 == 0 else order[::-1]:
            firsts[name].append(_keras_first_fit(strategies[name]))
    return firsts


def _variable_free_step(strategy):
    """Earlier rounds' step: no variables, no gradients (kept as a labelled extra row)."""
    import tensorflow as tf

    def replica():
        x = tf.fill([FEATURES, FEATURES], 1.0 / FEATURES)
        total = tf.reduce_sum(tf.matmul(x, x))
        return tf.distribute.get_replica_context().all_reduce("SUM", total)

    @tf.function
    def reduced():
        return strategy.reduce("SUM", strategy.run(replica), axis=None)

    return lambda: reduced().numpy()


def _cold_start_s(preset, zygote=True):
    """Seconds from starting the pod's hosts to its first all-reduce's result, the
    hosts' resident memory (MiB, each) then, and the CPU seconds of this process
    and every process it launched meanwhile; `zygote`: hosts forked from one."""
    import tensorflow as tf

    from compat_distribute.testing import fake_tpu

    _common.with_zygote(zygote)
    cpu = _common.tree_cpu_s()
    start = time.perf_counter()
    with fake_tpu(preset) as fake:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
        strategy = tf.distribute.TPUStrategy(resolver)
        value = _variable_free_step(strategy)()
        took = time.perf_counter() - start
        took_cpu = _common.tree_cpu_s() - cpu
        replicas = strategy.num_replicas_in_sync
        assert value == replicas * replicas * FEATURES, value
        rss = [_rss_mib(pid) for pid in fake.pod.pids]
    _common.with_zygote(True)
    return took, rss, took_cpu


def _cold_starts(preset, count):
    """{True: [(s, rss, CPU s), ...] with a zygote, False: [...] without}, alternating."""
    starts = {True: [], False: []}
    for i in range(count):
        for zygote in (True, False) if i % 2 == 0 else (False, True):
            starts[zygote].append(_cold_start_s(preset, zygote))
    return starts


def _zygote_row(preset, starts):
    """The README row: start-up with hosts forked by a zygote against fresh processes."""
    wall = {z: statistics.median(s for s, _, _ in starts[z]) for z in starts}
    cpu = {z: statistics.median(c for _, _, c in starts[z]) for z in starts}
    return {
        "measure": f"{preset} start-up to first all-reduce: hosts forked by a zygote / "
        f"fresh processes (COMPAT_DISTRIBUTE_ZYGOTE=0)",
        "value": f"wall {wall[True]:.1f} s / {wall[False]:.1f} s; CPU of every process "
        f"{cpu[True]:.1f} s / {cpu[False]:.1f} s (ratio {cpu[True] / cpu[False]:.2f})",
        "target": "CPU ratio < 1",
    }


def _rss_mib(pid):
    """Resident memory of process `pid`, MiB (Linux)."""
    with open(f"/proc/{pid}/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kib / 1024


def _cpu_s(pids):
    """CPU seconds (user + system) this process and processes `pids` have used (Linux)."""
    total = time.process_time()
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _cpu_per_step(calls, pids, steps, repeats, number):
    """{name: median CPU ms a step} of each of `calls`, over this process and `pids`
    (a pod's hosts and relay), the calls taken in turn (reversed every other repeat).

    Wall time on a loaded machine says little; CPU time summed over every process
    a step runs in is what a pod costs its machine.
    """
    spent = {name: [] for name in calls}
    order = list(calls)
    for i in range(repeats):
        for name in order if i % 2 == 0 else order[::-1]:
            calls[name]()
            start = _cpu_s(pids)
            for _ in range(number):
                calls[name]()
            spent[name].append((_cpu_s(pids) - start) / number / steps * 1e3)
    return {name: statistics.median(ms) for name, ms in spent.items()}


def _spread(values):
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold-starts", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--no-eight-hosts", dest="eight_hosts", action="store_false")
    parser.add_argument("--first-fits", type=int, default=3)
    args = parser.parse_args(argv)

    from compat_distribute.testing import set_virtual_devices

    set_virtual_devices(32)  # hosts=1 needs every core here
    from compat_distribute.testing import FakeTPUClusterResolver
    from compat_distribute.testing import FakeTPUStrategy
    from compat_distribute.testing._fake_tpu.replicate import set_trace_mode

    both_starts = _cold_starts(POD, args.cold_starts)
    starts = both_starts[True]
    timing = dict(repeats=args.repeats, number=3, warmup=2)

    strategies = {}
    pods = []
    try:
        pods.append(FakeTPUClusterResolver(POD))
        strategies["pod"] = FakeTPUStrategy(pods[-1])
        strategies["hosts=1"] = FakeTPUStrategy(FakeTPUClusterResolver(POD, hosts=1))
        strategies["v3-8"] = FakeTPUStrategy(FakeTPUClusterResolver("v3-8"))
        compared, cpu = {}, {}
        pod = pods[0].pod
        for steps in (1, 10):
            calls = {name: _training_step(s, steps) for name, s in strategies.items()}
            for baseline in ("v3-8", "hosts=1"):
                compared[f"train{steps}", baseline] = _common.compare(
                    calls["pod"], calls[baseline], **timing
                )
            pids = pod.pids + ([pod.relay_pid] if pod.relay_pid else [])
            cpu[steps] = _cpu_per_step(calls, pids, steps, args.repeats, timing["number"])
        # The pod's step traced once (the default) against traced per replica.
        per_replica = FakeTPUStrategy(pods[0])
        set_trace_mode(per_replica, "per_replica")
        compared["train1", "per_replica"] = _common.compare(
            _training_step(strategies["pod"], 1),
            _training_step(per_replica, 1),
            **timing,
        )
        # Keras 3 fit: the first step (trace and first run) and warm steps.
        keras_pair = {"pod": strategies["pod"], "v3-8": strategies["v3-8"]}
        firsts = _first_fits(keras_pair, args.first_fits)
        firsts.update(_first_fits({"pod per_replica": per_replica}, 1))
        warm_fit = _keras_warm_steps(keras_pair, args.repeats)
        free = {name: _variable_free_step(s) for name, s in strategies.items()}
        compared["variable_free", "v3-8"] = _common.compare(free["pod"], free["v3-8"], **timing)
        eight = None
        if args.eight_hosts:
            eight_starts = _cold_starts(EIGHT_HOSTS, 1)
            pods.append(FakeTPUClusterResolver(EIGHT_HOSTS))
            eight_pod = _training_step(FakeTPUStrategy(pods[-1]), 1)
            eight_one = _training_step(FakeTPUStrategy(FakeTPUClusterResolver(EIGHT_HOSTS, hosts=1)), 1)
            eight = (eight_starts, _common.compare(eight_pod, eight_one, **timing))
    finally:
        for resolver in pods:
            resolver.pod.stop()

    start_s = [s for s, _, _ in starts]
    rss = [r for _, rs, _ in starts for r in rs]
    rows = {
        "v3-32 start-up to first all-reduce, s": _spread(start_s),
        "v3-32 start-up (s, CPU s), hosts forked by a zygote": [
            (s, c) for s, _, c in both_starts[True]
        ],
        "v3-32 start-up (s, CPU s), hosts as fresh processes": [
            (s, c) for s, _, c in both_starts[False]
        ],
        "v3-32 host RSS at first all-reduce, MiB": _spread(rss),
        **{f"v3-32 pod {kind} vs {baseline}": r for (kind, baseline), r in compared.items()},
        **{f"train{steps} CPU ms a step, all processes": ms for steps, ms in cpu.items()},
    }
    table = [
        {
            "measure": "v3-32 pod (4 host processes): start-up to first all-reduce",
            "value": "{min:.1f} / {median:.1f} / {max:.1f} s (min / median / max)".format(
                **rows["v3-32 start-up to first all-reduce, s"]
            ),
            "target": "<= 10 s",
        },
        _zygote_row(POD, both_starts),
        {
            "measure": "v3-32 pod: resident memory per host process",
            "value": "{median:.0f} MiB (median; {min:.0f}-{max:.0f})".format(
                **rows["v3-32 host RSS at first all-reduce, MiB"]
            ),
            "target": "(reported)",
        },
    ]
    for steps in (1, 10):
        table += [
            _common.table_row(
                f"v3-32 pod / v3-8, training step, {steps} step(s) a call",
                compared[f"train{steps}", "v3-8"],
                "<= 4.4",
            ),
            _common.table_row(
                f"v3-32 pod / v3-32 hosts=1, training step, {steps} step(s) a call",
                compared[f"train{steps}", "hosts=1"],
                "<= 1.0",
            ),
        ]
    for steps, ms in cpu.items():
        table.append(
            {
                "measure": f"CPU a training step over all processes (client, relay, hosts), "
                f"{steps} step(s) a call",
                "value": " / ".join(f"{name} {ms[name]:.1f} ms" for name in ms),
                "target": "(reported)",
            }
        )
    table.append(
        _common.table_row(
            "v3-32 pod, training step traced once (one call a host) / traced per replica, "
            "1 step a call",
            compared["train1", "per_replica"],
            "(reported)",
        )
    )
    first_step = {name: statistics.median(s for s, _ in f) for name, f in firsts.items()}
    first_fit = {name: statistics.median(c for _, c in f) for name, f in firsts.items()}
    rows["Keras 3 fit first step (s), first fit call (s)"] = firsts
    rows["Keras 3 fit warm step (s)"] = warm_fit
    table += [
        {
            "measure": "Keras 3 fit, first step (trace and first run) v3-32 pod / v3-8",
            "value": f"{first_step['pod'] / first_step['v3-8']:.2f} ({first_step['pod']:.2f} s vs "
            f"{first_step['v3-8']:.2f} s, median of {args.first_fits}; traced per replica "
            f"{first_step['pod per_replica']:.2f} s)",
            "target": "<= 3",
        },
        {
            "measure": "Keras 3 fit, first fit call of one step (the step and the input "
            "iterators) v3-32 pod / v3-8",
            "value": f"{first_fit['pod'] / first_fit['v3-8']:.2f} ({first_fit['pod']:.2f} s vs "
            f"{first_fit['v3-8']:.2f} s)",
            "target": "(reported)",
        },
        {
            "measure": "Keras 3 fit, warm step v3-32 pod / v3-8 (medians of the steps of "
            "10-step epochs in turn)",
            "value": f"{warm_fit['pod'] / warm_fit['v3-8']:.2f} ({warm_fit['pod'] * 1e3:.1f} ms "
            f"vs {warm_fit['v3-8'] * 1e3:.1f} ms)",
            "target": "<= 4.4",
        },
    ]
    table.append(
        _common.table_row(
            "v3-32 pod / v3-8, variable-free step (matmul of constants, scalar all-reduce)",
            compared["variable_free", "v3-8"],
            "(extra row)",
        )
    )
    if eight is not None:
        eight_start, result = eight[0][True][0][0], eight[1]
        rows[f"{EIGHT_HOSTS} start-up to first all-reduce, s"] = eight_start
        rows[f"{EIGHT_HOSTS} start-up (s, CPU s), zygote / fresh processes"] = [
            (s, c) for z in (True, False) for s, _, c in eight[0][z]
        ]
        rows[f"{EIGHT_HOSTS} pod training step vs hosts=1"] = result
        table += [
            {
                "measure": f"{EIGHT_HOSTS} pod (8 host processes): start-up to first all-reduce",
                "value": f"{eight_start:.1f} s",
                "target": "<= 30 s",
            },
            _zygote_row(EIGHT_HOSTS, eight[0]),
            _common.table_row(
                f"{EIGHT_HOSTS} pod / {EIGHT_HOSTS} hosts=1, training step, 1 step a call",
                result,
                "(reported)",
            ),
        ]
    _common.report("pods", rows, table)
    sys.stdout.flush()
    os._exit(0)  # TensorFlow may block at exit on a context whose hosts are gone.


if __name__ == "__main__":
    main()
