"""The first calls of a one-trace step with Grappler's options set for the process.

bench_first_call's step and figures; the kinds: the fake's inlined call with
Grappler's defaults, with the meta optimizer off ("grappler off", as
`tf.config.optimizer.set_experimental_options` sets it), and with only the
costly passes the options reach off ("costly passes off";
bench_first_call.PROCESS_OPTIONS). Then a Keras 3 `fit` in `fake_tpu("v3-8")`,
Grappler's defaults ("fit on") against the meta optimizer off from the fake's
start ("fit auto"): its first epoch and its second (fresh processes,
alternating; results/fit_grappler.json). The fake adopts neither (docs/design.md,
"The first call").

    PYTHONPATH=. python benchmarks/bench_first_call_grappler.py [--repeats 3] [--replicas 8,32]
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position
import bench_first_call  # pylint: disable=wrong-import-position

KINDS = ("inlined", *bench_first_call.PROCESS_OPTIONS)
FIT_KINDS = ("fit on", "fit auto")  # "auto": Grappler off where the process set no option
FIT_BATCHES = 16  # per epoch
SAMPLE_TIMEOUT_S = 900


def fit_sample(grappler):
    """Two epochs of a Keras 3 fit in fake_tpu("v3-8"): each epoch's wall and CPU seconds."""
    from compat_distribute.testing import devices

    devices.set_virtual_devices(8)
    import keras
    import numpy as np
    import tensorflow as tf

    from compat_distribute.testing import fake_tpu

    class EpochTimes(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.wall, self.cpu = [], []

        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter(), time.process_time()

        def on_epoch_end(self, epoch, logs=None):
            self.wall.append(time.perf_counter() - self._start[0])
            self.cpu.append(time.process_time() - self._start[1])

    keras.utils.set_random_seed(0)
    rng = np.random.RandomState(0)
    x = rng.rand(FIT_BATCHES * 64, 64).astype("float32")
    y = rng.rand(FIT_BATCHES * 64, 1).astype("float32")
    times = EpochTimes()
    with fake_tpu("v3-8"):
        if grappler == "auto":
            tf.config.optimizer.set_experimental_options(
                bench_first_call.PROCESS_OPTIONS["grappler off"]
            )
        strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver())
        with strategy.scope():
            model = keras.Sequential(
                [keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
            )
            model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss="mse")
        history = model.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0, callbacks=[times])
    return {"wall_s": times.wall, "cpu_s": times.cpu, "losses": history.history["loss"]}


def sample(kind, replicas):
    if kind in FIT_KINDS:
        return fit_sample(kind.split()[1])
    return bench_first_call.sample(kind, replicas)


def fit_main(repeats):
    """The fit kinds: writes results/fit_grappler.json."""
    samples = {kind: [] for kind in FIT_KINDS}
    for repeat in range(repeats):
        for kind in FIT_KINDS if repeat % 2 == 0 else FIT_KINDS[::-1]:
            got = _common.fresh_sample(__file__, [kind, 8], SAMPLE_TIMEOUT_S)
            samples[kind].append(got)
            print(f"  {kind}: first epoch {got['wall_s'][0]:.2f} s (CPU {got['cpu_s'][0]:.2f} s)", flush=True)
    rows = {
        kind: {
            f"{epoch}_epoch_{clock}": statistics.median(s[clock][index] for s in samples[kind])
            for index, epoch in enumerate(("first", "second"))
            for clock in ("wall_s", "cpu_s")
        }
        for kind in FIT_KINDS
    }
    on, auto = rows["fit on"], rows["fit auto"]
    ratio = {key: auto[key] / on[key] for key in on}
    rows["fit auto / fit on"] = ratio
    same = all(a["losses"] == samples["fit on"][0]["losses"] for a in samples["fit auto"])
    table = [
        {
            "measure": "Keras 3 fit in fake_tpu(\"v3-8\"), Grappler off (auto) / on: first epoch; "
            "second epoch (CPU; wall)",
            "value": f"{ratio['first_epoch_cpu_s']:.2f}; {ratio['first_epoch_wall_s']:.2f} "
            f"({auto['first_epoch_cpu_s']:.2f} s vs {on['first_epoch_cpu_s']:.2f} s CPU); "
            f"{ratio['second_epoch_cpu_s']:.2f}; {ratio['second_epoch_wall_s']:.2f}; losses "
            + ("the same" if same else "differ"),
            "target": "first epoch < 1",
        }
    ]
    _common.report("fit_grappler", rows, table)


def main(repeats, replica_counts):
    bench_first_call.main(repeats, replica_counts, KINDS, "first_call_grappler")
    fit_main(repeats)


if __name__ == "__main__":
    _common.kind_and_replicas_main(
        __doc__.splitlines()[0], sample, main, repeats=3, replicas="8,32"
    )
