"""The loop that runs inside each `local_cluster` task process.

`cluster.LocalCluster` starts it through `cluster._BOOTSTRAP` (`python -c ...
--fd N --devices D --parent-pid P`, TF_CONFIG set), which arms the SIGUSR1
stack dump and says "alive" before this module is imported. `main` then
imports TensorFlow, sets up D virtual CPU devices, says "ready", and serves
calls from the parent over the socket on fd N:

    parent -> task: ("call", id, module, qualname, pickled (args, kwargs))
                    ("exit", 0, None)
    task -> parent: ("result", id, pickled result)
                    ("error", id, {"type", "message", "traceback", "exception"})

It builds no TensorFlow state of its own: the functions it runs do.
"""

import argparse
import faulthandler
import importlib
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from multiprocessing import connection as mp_connection

from compat_distribute.testing import cluster
from compat_distribute.testing import devices


def _exit_when_orphaned(parent_pid):
    # A worker busy in a hung call never reads its socket, so it would not
    # notice its parent dying; this thread does.
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(70)  # pylint: disable=protected-access


def _set_up_devices(count):
    # Before any op: logical devices are fixed once the runtime starts.
    devices.set_virtual_devices(count, "CPU")


def _error_info(e):
    try:  # The caller chains it as __cause__ when it unpickles there.
        exception = pickle.dumps(e)
        pickle.loads(exception)
    except Exception:  # pylint: disable=broad-except
        exception = None
    return {
        "type": type(e).__name__,
        "message": str(e),
        "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)),
        "exception": exception,
    }


def _call(module, qualname, payload):
    args, kwargs = pickle.loads(payload)
    fn = cluster._resolve(
        importlib.import_module(module), qualname
    )  # pylint: disable=protected-access
    result = fn(*args, **kwargs)
    try:
        return pickle.dumps(result)
    except Exception as e:  # pylint: disable=broad-except
        raise TypeError(
            f"the result of {module}:{qualname} does not pickle, so it cannot "
            f"reach the caller: {type(e).__name__}: {e}. Return plain Python or "
            f"NumPy values (call .numpy() on tensors)."
        ) from e


def main(argv=None, conn=None):
    """Serves calls until told to exit; `conn` is given when the bootstrap
    (cluster._BOOTSTRAP) already armed the stack dump and said "alive"."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--parent-pid", type=int, default=None)
    flags = parser.parse_args(argv)

    if conn is None:
        faulthandler.enable()  # Stacks on a crash (segfault, abort) too.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        conn = mp_connection.Connection(flags.fd)
        conn.send(("alive", {"pid": os.getpid()}))
    os.set_inheritable(flags.fd, False)  # Processes fn starts must not hold it.
    parent_pid = os.getppid() if flags.parent_pid is None else flags.parent_pid
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()

    try:
        cluster._WORKER_TF_CONFIG = cluster.parse_tf_config(
            os.environ["TF_CONFIG"]
        )  # pylint: disable=protected-access
        _set_up_devices(flags.devices)
    except BaseException:  # pylint: disable=broad-except
        conn.send(("startup_error", traceback.format_exc()))
        return 1
    conn.send(("ready", {"pid": os.getpid()}))

    while True:
        try:
            kind, call_id, *body = conn.recv()
        except EOFError:  # The parent went away.
            return 0
        if kind == "exit":
            conn.close()
            return 0
        try:
            answer = ("result", call_id, _call(*body))
        except BaseException as e:  # pylint: disable=broad-except
            answer = ("error", call_id, _error_info(e))
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(answer)


if __name__ == "__main__":
    sys.exit(main())
