"""run_steps against the hand-written tf.range loop of TensorFlow's TPU guide, on one strategy.

Same step (matmul, all-reduce, counter), same fake v3-8 (8 virtual CPUs), same
step count, interleaved repeats (see _common.compare). Ratios are run_steps
time / hand loop time, against the TPU guide's loop (returns nothing) and
against the same loop returning the last step's outputs; the target is <= 1.03.

    PYTHONPATH=. python benchmarks/bench_steps.py [--quick]
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position

DEVICES = 8
WIDTH = 64
# Iterators live until the process ends: TF 2.21 can block for up to a minute
# destroying one (see compat_distribute/_exit.py).
_KEEP = []


def main(quick=False):
    from compat_distribute.testing import devices

    devices.set_virtual_devices(DEVICES)

    import tensorflow as tf

    from compat_distribute import testing

    strategy = testing.FakeTPUStrategy(testing.FakeTPUClusterResolver("v3-8"))
    dataset = tf.data.Dataset.from_tensors(tf.ones([DEVICES, WIDTH])).repeat()

    def make():
        return _common.matmul_step(strategy, dataset, WIDTH)

    rows = {}
    for steps in (1, 20) if quick else (1, 20, 100):
        fn, it, counter = make()
        hand_fn, hand_it, _ = make()
        _KEEP.append((it, hand_it))
        n = tf.constant(steps, tf.int64)

        @tf.function
        def guide_loop(iterator, n):
            # TensorFlow's TPU guide: steps in a tf.range loop, nothing returned.
            for _ in tf.range(n):
                strategy.run(hand_fn, args=(next(iterator),))

        @tf.function
        def carrying_loop(iterator, n):
            # The same, returning the last step's outputs through the loop.
            out = strategy.run(hand_fn, args=(next(iterator),))
            for _ in tf.range(n - 1):
                out = strategy.run(hand_fn, args=(next(iterator),))
            return out

        before = int(counter.numpy())
        last = strategy.run_steps(fn, it, steps=steps)
        assert int(counter.numpy()) == before + steps
        assert len(strategy.experimental_local_results(last)) == DEVICES

        timing = dict(repeats=5 if quick else 11, number=3 if quick else 5, warmup=1 if quick else 2)
        for name, loop in (("TPU guide loop", guide_loop), ("loop carrying outputs", carrying_loop)):
            rows[f"run_steps(steps={steps}) / {name}"] = _common.compare(
                lambda: strategy.run_steps(fn, it, steps=steps),  # pylint: disable=cell-var-from-loop
                lambda: loop(hand_it, n),  # pylint: disable=cell-var-from-loop
                **timing,
            )
    table = [
        _common.table_row(name, result, "<= 1.03" if "guide" in name else "")
        for name, result in rows.items()
    ]
    _common.report("steps", rows, table)
    return rows


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
    from compat_distribute import _exit  # pylint: disable=wrong-import-position

    _exit.end_process(0)  # TF 2.21 can block at exit destroying tf.data iterators
