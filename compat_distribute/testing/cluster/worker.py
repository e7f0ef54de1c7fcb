"""The main of a task that serves `LocalCluster.run` (runs inside the task).

Internal: not part of the public API; the names below may change.

Started by `bootstrap` (TF_CONFIG set, `--devices D`, `--serve`), which
armed the stack dump and said `Alive`. `main` enters the task
(`context.enter`), makes D virtual CPU devices, starts the task's
tf.distribute.Server with `--serve` (a worker or ps task of parameter-server
training), says `Ready`, then answers each `protocol.Call` with a `Result`
or `Raised` until `Exit` or until the cluster's end of the connection closes.
Otherwise it builds no TensorFlow state of its own: the functions it runs do.
"""

import argparse
import importlib
import os
import pickle
import sys
import traceback

from compat_distribute._tf_config import parse_tf_config
from compat_distribute.testing import devices
from compat_distribute.testing.cluster import context
from compat_distribute.testing.cluster import protocol
from compat_distribute.testing.cluster import server
from compat_distribute.testing.cluster import sigterm

__all__ = ["main"]


def _answer(call):
    """The pickled `Result` of `call`, or of the `Raised` that it raised."""
    try:
        args, kwargs = pickle.loads(call.payload)
        with context.importing(call.function):
            module = importlib.import_module(call.module)
        fn = protocol.lookup(module, call.qualname)
        return protocol.dumps_result(call, fn(*args, **kwargs))
    except BaseException as e:  # pylint: disable=broad-except
        return protocol.dumps(protocol.Raised.from_exception(call.call_id, e))


def main(argv, conn):
    """Serves calls on `conn` until told to exit; returns the exit status."""
    parser = argparse.ArgumentParser(prog="local_cluster worker")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--serve", action="store_true")
    flags = parser.parse_args(argv)
    try:
        config = parse_tf_config(os.environ["TF_CONFIG"])
        context.enter(config)
        # Before any op: logical devices are fixed once the runtime starts.
        devices.set_virtual_devices(flags.devices, "CPU")
        if flags.serve:
            context.keep(server.start_server(config, flags.devices, boot_job=""))
    except BaseException:  # pylint: disable=broad-except
        conn.send(protocol.StartupFailed(traceback.format_exc()))
        return 1
    conn.send(protocol.Ready(os.getpid()))

    while True:
        try:
            message = conn.recv()
        except EOFError:  # The cluster went away.
            return 0
        if isinstance(message, protocol.Exit):
            conn.close()
            return 0
        answer = _answer(message)
        sigterm.reclaim()  # The call may have built a strategy, which takes SIGTERM.
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send_bytes(answer)
