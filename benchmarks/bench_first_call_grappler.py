"""The first calls of a one-trace step with Grappler's options set for the process.

bench_first_call's step and figures; the kinds: the fake's inlined call with
Grappler's defaults, with the meta optimizer off ("grappler off", as `fake_tpu()`
sets it), and with only the costly passes the options reach off
("costly passes off"; bench_first_call.PROCESS_OPTIONS).

    PYTHONPATH=. python benchmarks/bench_first_call_grappler.py [--repeats 3] [--replicas 8,32]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # pylint: disable=wrong-import-position
import bench_first_call  # pylint: disable=wrong-import-position

KINDS = ("inlined", *bench_first_call.PROCESS_OPTIONS)


def main(repeats, replica_counts):
    bench_first_call.main(repeats, replica_counts, KINDS, "first_call_grappler")


if __name__ == "__main__":
    _common.kind_and_replicas_main(
        __doc__.splitlines()[0], bench_first_call.sample, main, repeats=3, replicas="8,32"
    )
