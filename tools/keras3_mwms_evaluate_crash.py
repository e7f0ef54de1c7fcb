"""Counts crashes of Keras 3's `evaluate` after `fit` under a one-worker MultiWorkerMirroredStrategy.

    python tools/keras3_mwms_evaluate_crash.py --processes 4 --iterations 40
    .venv-nightly/bin/python tools/keras3_mwms_evaluate_crash.py      # a newer TensorFlow

A TensorFlow and Keras issue, not this package's: the processes it starts import
neither compat_distribute nor its tests. Each process builds, fits and evaluates a small
model `--iterations` times. On TensorFlow 2.21 with Keras 3.15 (and tf-nightly
2.23 with keras-nightly 3.16) some die of SIGSEGV or SIGABRT ("munmap_chunk():
invalid pointer") where `evaluate` drops its first distributed iterator
(docs/versions.md). The crash wants CPU contention: run it beside a test run. One
line a process; the last says `processes=P crashed=C`; the exit status is 1 when
any crashed.
"""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time

from compat_distribute import _env

PROGRAM = """
import faulthandler, sys
faulthandler.enable()
import numpy as np
import tensorflow as tf

# 8 CPU devices, as under the test suite's plugin; the strategy uses one.
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 8)
import keras

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.RandomState(0).randn(64, 4).astype("float32")
y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32") + 1.0
for i in range(int(sys.argv[1])):
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
        )
        model.compile(optimizer=keras.optimizers.SGD(0.08), loss="mse", steps_per_execution=1)
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    model.evaluate(x, y, batch_size=16, verbose=0)
    print("iteration", i, flush=True)
"""


def _outcome(returncode):
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit {returncode}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=_env.argument_type(_env.Count(8)), default=4)
    parser.add_argument("--iterations", type=_env.argument_type(_env.Count(1000)), default=40)
    parser.add_argument("--timeout", type=_env.argument_type(_env.Number(_env.MAX_SECONDS)),
                        default=1800, help="seconds, for all processes")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    with tempfile.TemporaryDirectory(prefix="mwms-evaluate-") as work, contextlib.ExitStack() as stack:
        program = os.path.join(work, "fit_evaluate.py")
        with open(program, "w") as f:
            f.write(PROGRAM)
        runs = []
        for n in range(args.processes):
            log = stack.enter_context(open(os.path.join(work, f"{n}.log"), "w+"))
            # In this process's session: a session of its own would give each its
            # own share of the CPU (Linux's autogroups), and the crash wants contention.
            child = stack.enter_context(subprocess.Popen(
                [sys.executable, program, str(args.iterations)],
                stdout=log, stderr=subprocess.STDOUT, cwd=work))
            stack.callback(child.kill)  # An interrupted tool leaves none running.
            runs.append((child, log))
        crashed = 0
        for n, (child, log) in enumerate(runs):
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            log.seek(0)
            lines = log.read().splitlines()
            done = sum(line.startswith("iteration ") for line in lines)
            if child.returncode in (-signal.SIGSEGV, -signal.SIGABRT):
                crashed += 1
            where = [line.strip() for line in lines if "epoch_iterator.py" in line][:1]
            print(f"process {n}: {_outcome(child.returncode)} after {done} of "
                  f"{args.iterations} iterations {' '.join(where)}".rstrip())
    print(f"processes={args.processes} crashed={crashed}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
