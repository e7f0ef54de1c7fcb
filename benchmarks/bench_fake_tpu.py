"""The fake TPU's costs: run_steps against hand-written loops, run against MirroredStrategy.

All on the same 8 virtual CPU devices in one process. Ratios are candidate
time / baseline time for the same work, measured side by side (interleaved
repeats, medians; see _common.compare).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position

from compat_distribute import _exit  # pylint: disable=wrong-import-position

DEVICES = 8
STEPS = 20
WIDTH = 64


def main():
    from compat_distribute.testing import devices

    devices.set_virtual_devices(DEVICES)

    import tensorflow as tf

    from compat_distribute import testing

    fake = testing.FakeTPUStrategy(testing.FakeTPUClusterResolver("v3-8"))
    raw = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(DEVICES)])
    assert fake.extended.worker_devices == raw.extended.worker_devices

    dataset = tf.data.Dataset.from_tensors(tf.ones([DEVICES, WIDTH])).repeat()

    def make(strategy):
        return _common.matmul_step(strategy, dataset, WIDTH)

    # run_steps(steps=N): one tf.function loop built by compat_distribute.
    steps_fn, steps_it, steps_counter = make(fake)
    steps_n = tf.constant(STEPS, tf.int64)

    def run_steps():
        return fake.run_steps(steps_fn, steps_it, steps=STEPS)

    # N separate tf.function calls of strategy.run (one step per host round trip).
    single_fn, single_it, _ = make(fake)

    @tf.function
    def one_step():
        return fake.run(single_fn, args=(next(single_it),))

    def n_calls():
        for _ in range(STEPS):
            out = one_step()
        return out

    # The hand-written tf.range loop, as in TensorFlow's TPU guide (the
    # iterator is an argument), on raw TensorFlow and on the fake; and one
    # that captures its iterator instead (passing an iterator over 8 devices
    # as an argument costs about 1 ms per call).
    def hand_loop(strategy, capture=False):
        fn, it, _ = make(strategy)

        @tf.function
        def loop(iterator, n):
            out = strategy.run(fn, args=(next(iterator),))
            for _ in tf.range(n - 1):
                out = strategy.run(fn, args=(next(iterator),))
            return out

        @tf.function
        def captured_loop(n):
            out = strategy.run(fn, args=(next(it),))
            for _ in tf.range(n - 1):
                out = strategy.run(fn, args=(next(it),))
            return out

        if capture:
            return lambda: captured_loop(steps_n)
        return lambda: loop(it, steps_n)

    hand_fake, hand_raw = hand_loop(fake), hand_loop(raw)
    hand_raw_captured = hand_loop(raw, capture=True)

    # One step per tf.function call: the fake's run against MirroredStrategy's.
    def one_step_of(strategy):
        fn, it, _ = make(strategy)

        @tf.function
        def step():
            return strategy.run(fn, args=(next(it),))

        return step

    fake_step, raw_step = one_step_of(fake), one_step_of(raw)

    # Where the fake's extra time per step goes: TPUExtended asks its input for
    # get_next_as_optional (partial batches padded per replica), which the fake
    # copies and MirroredStrategy leaves off; and TPUStrategyV2 packs variables.
    raw_optional = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(DEVICES)])
    raw_optional.extended.experimental_enable_get_next_as_optional = True
    raw_optional_step = one_step_of(raw_optional)
    unpacked = testing.FakeTPUStrategy(testing.FakeTPUClusterResolver("v3-8"))
    unpacked._enable_packed_variable_in_eager_mode = False  # pylint: disable=protected-access
    unpacked_step = one_step_of(unpacked)

    # Eager run of a tf.function step function (the Python path of run).
    x = tf.ones([4, WIDTH])

    def eager_fn_of(strategy):
        with strategy.scope():
            w = tf.Variable(tf.eye(WIDTH))

        @tf.function
        def fn():
            return tf.reduce_sum(tf.matmul(x, w))

        return lambda: strategy.run(fn)

    fake_eager, raw_eager = eager_fn_of(fake), eager_fn_of(raw)

    # Batches consumed and counter steps, checked before timing.
    before = int(steps_counter.numpy())
    run_steps()
    assert int(steps_counter.numpy()) == before + STEPS

    rows = {
        f"run_steps(steps={STEPS}) vs hand tf.range loop, raw MirroredStrategy": _common.compare(
            run_steps, hand_raw, number=5
        ),
        f"run_steps(steps={STEPS}) vs hand tf.range loop, same fake strategy": _common.compare(
            run_steps, hand_fake, number=5
        ),
        f"run_steps(steps={STEPS}) vs hand loop capturing its iterator, raw MirroredStrategy": (
            _common.compare(run_steps, hand_raw_captured, number=5)
        ),
        f"run_steps(steps={STEPS}) vs {STEPS} tf.function calls of run": _common.compare(
            run_steps, n_calls, number=5
        ),
        "fake run vs MirroredStrategy run: one step per tf.function call": _common.compare(
            fake_step, raw_step, number=50
        ),
        "fake run vs MirroredStrategy run: eager run(tf.function)": _common.compare(
            fake_eager, raw_eager, number=50
        ),
        "fake run vs MirroredStrategy run with get_next_as_optional (the TPU's input mode)": (
            _common.compare(fake_step, raw_optional_step, number=50)
        ),
        "MirroredStrategy run with get_next_as_optional vs without": _common.compare(
            raw_optional_step, raw_step, number=50
        ),
        "fake run, packed variables (TPU default) vs unpacked": _common.compare(
            fake_step, unpacked_step, number=50
        ),
    }
    keys = list(rows)
    table = [
        _common.table_row(
            f"run_steps(steps={STEPS}) / hand-written tf.range loop (TF TPU guide) on raw MirroredStrategy",
            rows[keys[0]],
            "<= 1.03",
        ),
        _common.table_row(
            f"run_steps(steps={STEPS}) / {STEPS} tf.function calls of strategy.run",
            rows[keys[3]],
            "< 1 (faster)",
        ),
        _common.table_row(
            "fake TPU run / raw MirroredStrategy run (tf.function step)", rows[keys[4]], "<= 1.02"
        ),
        _common.table_row(
            "fake TPU run / raw MirroredStrategy run (eager, tf.function fn)",
            rows[keys[5]],
            "<= 1.02",
        ),
        _common.table_row(
            "fake TPU run / MirroredStrategy run with get_next_as_optional, as the TPU's input",
            rows[keys[6]],
            "<= 1.02",
        ),
        _common.table_row(
            "MirroredStrategy with get_next_as_optional / without (the input mode's own cost)",
            rows[keys[7]],
        ),
    ]
    _common.report("fake_tpu", rows, table)


if __name__ == "__main__":
    main()
    # The results are written; TensorFlow 2.21 can block for minutes destroying
    # the benchmark's infinite tf.data iterators at exit.
    _exit.end_process(0)
