"""How long programs fed from distributed datasets take to end, and the input rate.

TensorFlow 2.21 joins each tf.data iterator's autotuning thread when the
iterator dies; the thread often sleeps out its optimisation period (up to a
minute) first. The strategies of compat_distribute distribute datasets with
autotuning off (`compat_distribute._input`). Measured here, each program in a
fresh process fed for `--feed` seconds (30 by default), its teardown timed from
outside, from the end of feeding to the process's exit:

(a) a v3-8 fake fed from `experimental_distribute_dataset`, then the iterator
    dropped and the process ended, beside a plain one-device tf.data program
    doing the same (target: within 3 s of it); with `--unfixed`, also TF's own
    `MirroredStrategy` over the same 8 CPUs, which is the fake's input path
    without the fix;
(b) Keras 3 `fit` on the fake, stopped after the feed, then the process ended,
    beside `fit` with no strategy (target: within 3 s);
(c) a pytest session (a one-test project run with the compat_distribute plugin,
    as a user runs it) whose test feeds the plugin's `tpu_strategy`, beside one
    whose test feeds a plain tf.data iterator (target: within 3 s);
(e) the `compat-distribute smoke` run (fake TPU v3-8) left to end as a plain
    Python program would, with no `end_process`: seconds from its report to
    the process's exit (the command itself still ends through `end_process`);
(d) the input rate (elements/s) of a v3-8 fake's distributed dataset with the
    fix and without it (the program's own `autotune.enabled = True`, which the
    fix leaves alone), alternated in one process: min, median, max over
    `--repeats`.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FEED_S = 30
TARGET_GAP_S = 3.0
TIMEOUT_S = 600
SMOKE = "smoke run ended normally, no end_process (from its report)"

_PRELUDE = """
import os, sys, time
FEED = float(os.environ["BENCH_FEED_S"])
def fed():
    print("FED", repr(time.time()), flush=True)
def source(tf):
    return (tf.data.Dataset.range(10**9)
            .map(lambda x: x * 3, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(16).prefetch(tf.data.AUTOTUNE))
"""

# (a): feed `FEED` seconds from `iterable` (a dataset, or a strategy's distribution
# of one), drop the iterator, end.
_FED_FROM = """
{setup}
iterator = iter({iterable})
start = time.time()
while time.time() - start < FEED:
    next(iterator)
fed()
del iterator
"""
_EIGHT_CPUS = """
from compat_distribute import testing
testing.set_virtual_devices(8)
import tensorflow as tf
"""


def _fed_from(setup, iterable):
    return _FED_FROM.format(setup=textwrap.dedent(setup), iterable=iterable)


PROGRAMS = {
    "plain tf.data, one device": _fed_from("import tensorflow as tf", "source(tf)"),
    "v3-8 fake, experimental_distribute_dataset": _fed_from(
        _EIGHT_CPUS + 'strategy = testing.FakeTPUStrategy(testing.FakeTPUClusterResolver("v3-8"))',
        "strategy.experimental_distribute_dataset(source(tf))",
    ),
    "TF MirroredStrategy on 8 CPUs (the fake's input path unfixed)": _fed_from(
        _EIGHT_CPUS + 'strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(8)])',
        "strategy.experimental_distribute_dataset(source(tf))",
    ),
    "Keras 3 fit, no strategy": """
        import tensorflow as tf
        STRATEGY = None
        exec(os.environ["BENCH_FIT"])
        """,
    "Keras 3 fit, v3-8 fake": _EIGHT_CPUS + """
import compat_distribute
STRATEGY = compat_distribute.TPUStrategy(testing.FakeTPUClusterResolver("v3-8"))
exec(os.environ["BENCH_FIT"])
""",
}

_FIT = """
import contextlib
import keras
class StopAfterFeeding(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.start = time.time()
    def on_train_batch_end(self, batch, logs=None):
        if not self.model.stop_training and time.time() - self.start >= FEED:
            self.model.stop_training = True
            fed()
data = tf.data.Dataset.range(10**9).map(
    lambda i: (tf.ones([4]), tf.ones([1])), num_parallel_calls=tf.data.AUTOTUNE
).batch(16).prefetch(tf.data.AUTOTUNE)
with STRATEGY.scope() if STRATEGY else contextlib.nullcontext():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(data, epochs=10**6, steps_per_epoch=50, callbacks=[StopAfterFeeding()], verbose=0)
"""

# (c): a test feeding `FEED` seconds from `iterable`, then writing when it stopped.
_PYTEST_FEED = """
import os, time
import tensorflow as tf
def test_feed({fixture}):
    dataset = tf.data.Dataset.range(10**9).map(
        lambda x: x * 3, num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(-1)
    iterator = iter({iterable})
    start = time.time()
    while time.time() - start < float(os.environ["BENCH_FEED_S"]):
        next(iterator)
    with open(os.environ["BENCH_FED_FILE"], "w") as f:
        f.write(repr(time.time()))
"""

_PYTEST_TESTS = {
    "pytest session, plain tf.data test": _PYTEST_FEED.format(fixture="", iterable="dataset"),
    "pytest session, plugin's tpu_strategy (v3-8 fake)": _PYTEST_FEED.format(
        fixture="tpu_strategy", iterable="tpu_strategy.experimental_distribute_dataset(dataset)"
    ),
}


def _env(feed_s, **extra):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2", BENCH_FEED_S=str(feed_s))
    env.update(extra)
    return env


def teardown_of_program(body, feed_s):
    """Seconds from the end of feeding to the exit of a fresh process running `body`."""
    code = _PRELUDE + textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=feed_s + TIMEOUT_S,
        env=_env(feed_s, BENCH_FIT=_FIT),
        check=False,
    )
    ended = time.time()
    fed = [l for l in proc.stdout.splitlines() if l.startswith("FED ")]
    if proc.returncode != 0 or len(fed) != 1:
        raise RuntimeError(f"exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return ended - float(fed[0].split()[1])


_SMOKE_ENDING_NORMALLY = """
import sys, time
from compat_distribute.smoke.cli import main
code = main(["smoke", "--json"])
print("FED", repr(time.time()), flush=True)
sys.exit(code)
"""


def teardown_of_smoke_run():
    """Seconds from the smoke report to the exit of a process that ends normally."""
    return teardown_of_program(_SMOKE_ENDING_NORMALLY, 0)


def teardown_of_pytest_session(test_source, feed_s):
    """Seconds from the end of a one-test pytest session's feeding to pytest's exit."""
    with tempfile.TemporaryDirectory() as project:
        with open(os.path.join(project, "pytest.ini"), "w") as f:
            f.write("[pytest]\ntf_devices = 8\n")
        with open(os.path.join(project, "test_feed.py"), "w") as f:
            f.write(textwrap.dedent(test_source))
        fed_file = os.path.join(project, "fed")
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", project],
            capture_output=True,
            text=True,
            timeout=feed_s + TIMEOUT_S,
            env=_env(feed_s, BENCH_FED_FILE=fed_file),
            cwd=project,
            check=False,
        )
        ended = time.time()
        if proc.returncode != 0:
            raise RuntimeError(f"pytest exited {proc.returncode}:\n{proc.stdout[-3000:]}")
        with open(fed_file) as f:
            return ended - float(f.read())


def summary(values):
    return {
        "min": round(min(values), 2),
        "median": round(statistics.median(values), 2),
        "max": round(max(values), 2),
    }


def input_rates(repeats, seconds):
    """(with the fix, without) elements/s of a v3-8 fake's distributed dataset, alternated."""
    from compat_distribute import testing

    testing.set_virtual_devices(8)
    import tensorflow as tf

    strategy = testing.FakeTPUStrategy(testing.FakeTPUClusterResolver("v3-8"))
    batch = 64

    def dataset(autotune):
        ds = (
            tf.data.Dataset.range(10**9)
            .map(
                lambda x: tf.reduce_sum(tf.sin(tf.cast(tf.range(512, dtype=tf.int64) + x, tf.float32))),
                num_parallel_calls=tf.data.AUTOTUNE,
            )
            .batch(batch)
            .prefetch(tf.data.AUTOTUNE)
        )
        if autotune:  # The program's own choice, which the fix leaves alone.
            options = tf.data.Options()
            options.autotune.enabled = True
            ds = ds.with_options(options)
        return ds

    kept = []  # Autotuned iterators would stall when deleted: kept to the end.

    def rate(autotune):
        iterator = iter(strategy.experimental_distribute_dataset(dataset(autotune)))
        kept.append(iterator)
        for _ in range(20):
            next(iterator)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            next(iterator)
            steps += 1
        return steps * batch / (time.perf_counter() - start)

    with_fix, without = [], []
    for i in range(repeats):
        order = [(False, with_fix), (True, without)]
        if i % 2:
            order.reverse()
        for autotune, out in order:
            out.append(rate(autotune))
            print(f"  rate {'without' if autotune else 'with'} the fix: {out[-1]:,.0f}/s", flush=True)
    return with_fix, without


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--feed", type=float, default=FEED_S, help=f"seconds fed (default {FEED_S})")
    parser.add_argument("--runs", type=int, default=1, help="processes of each program (default 1)")
    parser.add_argument("--repeats", type=int, default=7, help="input-rate repeats (default 7)")
    parser.add_argument("--rate-seconds", type=float, default=3.0, help="seconds per rate repeat")
    parser.add_argument("--unfixed", action="store_true", help="also time TF's unfixed path")
    parser.add_argument(
        "--only", choices=("teardowns", "rates"), help="run only (a)-(c) and (e), or only (d)"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.feed <= 600:
        parser.error(f"--feed must be from 1 to 600 seconds; got {args.feed}")
    if not 1 <= args.runs <= 50 or not 1 <= args.repeats <= 100:
        parser.error(f"--runs must be 1 to 50 and --repeats 1 to 100; got {args.runs}, {args.repeats}")

    programs = dict(PROGRAMS)
    if not args.unfixed:
        del programs["TF MirroredStrategy on 8 CPUs (the fake's input path unfixed)"]
    teardowns = {}
    for _ in range(0 if args.only == "rates" else args.runs):
        for name, body in programs.items():
            teardowns.setdefault(name, []).append(teardown_of_program(body, args.feed))
            print(f"  {name}: teardown {teardowns[name][-1]:.2f} s", flush=True)
        for name, source in _PYTEST_TESTS.items():
            teardowns.setdefault(name, []).append(teardown_of_pytest_session(source, args.feed))
            print(f"  {name}: teardown {teardowns[name][-1]:.2f} s", flush=True)
        teardowns.setdefault(SMOKE, []).append(teardown_of_smoke_run())
        print(f"  {SMOKE}: teardown {teardowns[SMOKE][-1]:.2f} s", flush=True)

    rows = {f"teardown (s): {k}": summary(v) for k, v in teardowns.items()}
    table = []
    if teardowns:
        rows["seconds fed"] = args.feed
        table += teardown_table(teardowns, rows, args.feed)
    if args.only != "teardowns":
        table += rate_table(*input_rates(args.repeats, args.rate_seconds), rows)
    _common.report("input_exit", rows, table)
    # The kept autotuned iterators of (d) would stall this process's exit.
    from compat_distribute import _exit

    _exit.end_process(0)


def teardown_table(teardowns, rows, feed):
    """README rows for (a)-(c) and (e); adds the gaps to `rows`."""
    pairs = (
        ("plain tf.data, one device", "v3-8 fake, experimental_distribute_dataset", "(a) iterator"),
        ("Keras 3 fit, no strategy", "Keras 3 fit, v3-8 fake", "(b) Keras 3 fit"),
        (
            "pytest session, plain tf.data test",
            "pytest session, plugin's tpu_strategy (v3-8 fake)",
            "(c) pytest session",
        ),
    )
    table = []
    for plain, fake, label in pairs:
        gap = statistics.median(teardowns[fake]) - statistics.median(teardowns[plain])
        rows[f"{label}: teardown gap, fake minus plain (s)"] = round(gap, 2)
        table.append(
            {
                "measure": f"{label}: teardown after {feed:g} s fed, fake vs plain",
                "value": f"{statistics.median(teardowns[fake]):.1f} s vs "
                f"{statistics.median(teardowns[plain]):.1f} s (gap {gap:+.1f} s)",
                "target": f"gap <= {TARGET_GAP_S:g} s",
            }
        )
    table.append(
        {
            "measure": "(e) smoke run ended with no end_process: report to exit",
            "value": f"{statistics.median(teardowns[SMOKE]):.1f} s",
            "target": "report",
        }
    )
    return table


def rate_table(with_fix, without, rows):
    """The README row for (d); adds the rates to `rows`."""
    rows["(d) input rate with the fix (elements/s)"] = summary(with_fix)
    rows["(d) input rate without the fix (elements/s)"] = summary(without)
    ratio = statistics.median(with_fix) / statistics.median(without)
    rows["(d) median rate, with / without the fix"] = round(ratio, 3)
    return [
        {
            "measure": "(d) v3-8 input rate, with / without the fix (median elements/s)",
            "value": f"{ratio:.2f} ({statistics.median(with_fix):,.0f} vs "
            f"{statistics.median(without):,.0f})",
            "target": "report",
        }
    ]


if __name__ == "__main__":
    main()
