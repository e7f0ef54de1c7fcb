"""The main of a task that serves `LocalCluster.run` (runs inside the task).

Internal: not part of the public API; the names below may change.

Started by `bootstrap` (TF_CONFIG set, `--devices D`, `--serve`), which
armed the stack dump and said `Alive`. `main` enters the task
(`context.enter`), makes D virtual CPU devices, starts the task's
tf.distribute.Server with `--serve` (a worker or ps task of parameter-server
training), says `Ready`, then answers each `protocol.Call` with a `Result`
or `Raised` until `Exit` or until the cluster's end of the connection closes;
a function that calls sys.exit ends the task's process with that status.
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


# The module whose import started TensorFlow's runtime in this task, if one did.
_started_tensorflow = None


def _import(call):
    """The module of `call`'s function, imported; notes a module whose import
    ran TensorFlow (an op at its top level), which a strategy built later trips on."""
    global _started_tensorflow
    before = _runtime_started()
    with context.importing(call.function):
        module = importlib.import_module(call.module)
    if not before and _runtime_started() and _started_tensorflow is None:
        _started_tensorflow = call.module
    return module


def _runtime_started():
    if "tensorflow" not in sys.modules:
        return False
    from compat_distribute.testing import _tf  # pylint: disable=g-import-not-at-top

    return _tf.runtime_initialized()


def _hint(e):
    """Why `e` happened, when the import of a test module started TensorFlow."""
    if _started_tensorflow is None or "program startup" not in str(e):
        return None
    return (
        f"importing {_started_tensorflow!r} in this task ran TensorFlow at its top level (an "
        f"op, a variable or a device query), which starts TensorFlow's runtime before the "
        f"function could build its multi-worker strategy. Move that code into a function "
        f"(or a fixture), so that the task's first TensorFlow call builds the strategy."
    )


def _answer(call):
    """The pickled `Result` of `call`, or of the `Raised` that it raised; a
    SystemExit (sys.exit in the task's code) passes: the task's process ends."""
    try:
        args, kwargs = pickle.loads(call.payload)
        fn = protocol.lookup(_import(call), call.qualname)
        return protocol.dumps_result(call, fn(*args, **kwargs))
    except SystemExit:
        raise
    except BaseException as e:  # pylint: disable=broad-except
        return protocol.dumps(protocol.Raised.from_exception(call.call_id, e, _hint(e)))


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
        if flags.devices > 1:
            from compat_distribute.testing import _tf  # pylint: disable=g-import-not-at-top

            _tf.give_multi_worker_strategies_local_cpus(flags.devices)
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
        try:
            answer = _answer(message)
        except SystemExit as e:  # As a process that calls sys.exit ends.
            sys.stdout.flush()
            if e.code is None or isinstance(e.code, int):
                return e.code or 0
            print(e.code, file=sys.stderr, flush=True)
            return 1
        sigterm.reclaim()  # The call may have built a strategy, which takes SIGTERM.
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send_bytes(answer)
