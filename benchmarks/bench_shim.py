"""The shims' own overhead: compat_distribute strategies against raw tf.distribute.

Ratios are shim time / raw TF time for the same work, measured side by side.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position


def main():
    import tensorflow as tf

    import compat_distribute as cd

    shim = cd.MultiWorkerMirroredStrategy()
    raw = tf.distribute.MultiWorkerMirroredStrategy()
    x = tf.random.uniform([256, 256])

    def make_step(strategy):
        with strategy.scope():
            w = tf.Variable(tf.random.uniform([256, 256]))

        @tf.function
        def step():
            def replica_fn():
                y = tf.matmul(x, w)
                return tf.distribute.get_replica_context().all_reduce("SUM", tf.reduce_sum(y))

            return strategy.run(replica_fn)

        return step

    shim_step, raw_step = make_step(shim), make_step(raw)
    value = tf.constant([1.0, 2.0])
    rows = {
        "MWMS run step (tf.function, all-reduce)": _common.compare(
            shim_step, raw_step, repeats=40, number=50
        ),
        "MWMS reduce(SUM, value) eager": _common.compare(
            lambda: shim.reduce("SUM", value),
            lambda: raw.reduce("SUM", value, axis=None),
            number=200,
        ),
        "MWMS experimental_local_results eager": _common.compare(
            lambda: shim.experimental_local_results(value),
            lambda: raw.experimental_local_results(value),
            number=2000,
        ),
    }
    table = [
        _common.table_row(
            "shim / raw tf.distribute: MWMS step with all-reduce (tf.function)",
            rows["MWMS run step (tf.function, all-reduce)"],
            "<= 1.02",
        ),
        _common.table_row(
            "shim / raw tf.distribute: reduce without axis (eager)",
            rows["MWMS reduce(SUM, value) eager"],
            "<= 1.02",
        ),
    ]
    table.append(
        _common.table_row(
            "noise floor: the same TF call on both (experimental_local_results)",
            rows["MWMS experimental_local_results eager"],
            "1.00 +- noise",
        )
    )
    _common.report("shim", rows, table)


if __name__ == "__main__":
    main()
