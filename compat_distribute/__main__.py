"""`compat-distribute`: a minimal V1-signature example, run end to end."""

import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["smoke"]:
        print("usage: compat-distribute smoke", file=sys.stderr)
        return 2
    import compat_distribute as cd  # pylint: disable=g-import-not-at-top

    strategy = cd.MultiWorkerMirroredStrategy(cd.CollectiveCommunication.AUTO)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(21.0)) * 2)
    ok = float(total) == 42.0 * strategy.num_replicas_in_sync
    print(f"{'PASS' if ok else 'FAIL'} v1 MultiWorkerMirroredStrategy reduce: {float(total)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
