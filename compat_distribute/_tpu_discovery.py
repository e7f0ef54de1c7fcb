"""Finding and connecting a real TPU: the one place that asks "is there a TPU here?".

The "auto" rule, connecting within a deadline, and `TPUUnreachableError` naming
what to do.
"""

import dataclasses
import sys
import threading
import traceback

DEFAULT_TIMEOUT_S = 300.0  # Initialising a large TPU slice takes minutes.

USE_THE_FAKE = (
    "To run TPU code without a TPU, use the fake: wrap it in "
    "`with compat_distribute.testing.fake_tpu(): ...`, or run "
    "`compat-distribute smoke --tpu=fake`."
)


class TPUUnreachableError(RuntimeError):
    """A real TPU was asked for (or configured) and cannot be used."""


@dataclasses.dataclass(frozen=True)
class TPUHere:
    """A TPU `tpu_here()` found: `name` as `TPUClusterResolver(tpu=...)` takes it."""

    name: str | None  # None: the TPU the environment names
    why: str


# Where TPUClusterResolver() reads a TPU's name, in TensorFlow's order (tpu/client/client.py).
TPU_ENV_VARS = ("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_NAME", "TPU_CONFIG")


def _naming_variable():
    """(variable, value) of the environment variable that names the TPU, or None."""
    import os  # pylint: disable=g-import-not-at-top

    return next(((v, os.environ[v]) for v in TPU_ENV_VARS if v in os.environ), None)


def _shown(name):
    if name is not None:
        return f"TPU {name!r}"
    named = _naming_variable()
    return "the TPU named by the environment" + (f" ({named[0]}={named[1]!r})" if named else "")


def _fix(name):
    """What to do about an unreachable TPU `name` (None: the environment's)."""
    named = _naming_variable() if name is None else None
    if named is None:
        return ""
    return (
        f" Set {named[0]} to a reachable TPU (its name, or grpc://host:port), or unset it: "
        f"then 'auto' takes this host's own TPU, else the local GPUs or the fake."
    )


def _environment_names_a_tpu():
    from compat_distribute import _tf  # pylint: disable=g-import-not-at-top

    try:
        _tf.TPUClient(tpu=None)  # Raises ValueError when nothing names a TPU.
    except ValueError:
        return False
    except Exception:  # pylint: disable=broad-except
        return True  # Named, but the look-up failed: connect() says why.
    return True


def _tpu_devices_attached():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return bool(tf.config.list_physical_devices("TPU"))  # Does not start the runtime.


def tpu_here():
    """The TPU this machine is configured for, or None; starts no runtime."""
    if _environment_names_a_tpu():
        return TPUHere(None, "TPU named by the environment")
    if _tpu_devices_attached():
        return TPUHere("local", "TPU attached to this host")
    return None


def _look_up(name):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)


def _probe(master, timeout):
    """Fails fast when a grpc:// worker does not accept a TCP connection.

    TensorFlow's own connect retries for minutes against a closed port.
    """
    import socket  # pylint: disable=g-import-not-at-top

    address = master.split("://", 1)[-1]
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=min(timeout, 30.0)):
            pass
    except (OSError, ValueError) as e:
        raise TPUUnreachableError(f"TPU worker {address} does not answer: {e}") from None


def connect_and_initialize(name, timeout=DEFAULT_TIMEOUT_S):
    """Resolves, connects and initialises TPU `name`; returns (resolver, topology)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    resolver = _look_up(name)
    if name != "local":
        master = resolver.master()
        if not master:
            raise TPUUnreachableError(f"{_shown(name)} has no worker address")
        _probe(master, timeout)
        tf.config.experimental_connect_to_cluster(resolver)
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    return resolver, topology


def connect(name, *, timeout=DEFAULT_TIMEOUT_S, connect_fn=None):
    """Runs `connect_fn(name)` (default `connect_and_initialize`) with a deadline.

    Returns its result. Raises `TPUUnreachableError` with the cause, or, past
    `timeout` seconds, with the Python stack of the blocked call (the call
    itself cannot be cancelled; the caller is expected to end the process).
    """
    if connect_fn is None:
        return _within(
            timeout, lambda: connect_and_initialize(name, timeout), name, "connect and initialise"
        )
    return _within(timeout, lambda: connect_fn(name), name, "connect and initialise")


def check_name(name, *, timeout=DEFAULT_TIMEOUT_S):
    """Checks that TPU `name` can be looked up, without connecting to it.

    For a process that must not hold the TPU itself (an xdist controller).
    """
    _within(timeout, lambda: _look_up(name), name, "resolve")


def _within(timeout, fn, name, what):
    outcome = {}

    def target():
        try:
            outcome["result"] = fn()
        except BaseException as e:  # pylint: disable=broad-except
            outcome["error"] = e

    thread = threading.Thread(target=target, name=f"tpu-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        frame = sys._current_frames().get(thread.ident)  # pylint: disable=protected-access
        stack = "".join(traceback.format_stack(frame)) if frame else "(no stack)\n"
        raise TPUUnreachableError(
            f"{_shown(name)} did not {what} within {timeout:g} s.{_fix(name)} The call was "
            f"blocked at:\n{stack}"
        )
    if "error" in outcome:
        e = outcome["error"]
        if isinstance(e, TPUUnreachableError):
            raise e
        first_line = (str(e).strip().splitlines() or [""])[0]
        fix = _fix(name)
        raise TPUUnreachableError(
            f"{_shown(name)} is not reachable: {type(e).__name__}: {first_line}"
            + (f".{fix}" if fix else "")
        ) from e
    return outcome.get("result")


def require_tpu_for(resolver):
    """Raises `TPUUnreachableError` when `resolver` finds no TPU core, or is
    None (TF1's default) and nothing names a TPU.

    TensorFlow's TPUStrategy indexes the resolver's TPU devices and fails with
    an IndexError when there are none (`TPUClusterResolver(tpu="local")` on a
    host without a TPU). The device listing is asked only when this host has
    no TPU attached; TensorFlow asks the same right after.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if resolver is None and not _environment_names_a_tpu():
        # TF builds TPUClusterResolver(""), which fails with "Please provide a
        # TPU Name to connect to." when nothing names a TPU.
        raise TPUUnreachableError(
            "no TPU found: TPUStrategy() without a resolver uses the TPU named by the "
            "environment (TPU_NAME, KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS or TPU_CONFIG), and "
            "none is set. Pass tpu_cluster_resolver=tf.distribute.cluster_resolver."
            f"TPUClusterResolver(tpu=NAME) (tpu='local' on a TPU VM). {USE_THE_FAKE}"
        )
    if not isinstance(resolver, tf.distribute.cluster_resolver.TPUClusterResolver):
        return
    if _tpu_devices_attached() or resolver.get_tpu_system_metadata().num_cores:
        return
    raise TPUUnreachableError(
        "no TPU found: the TPUClusterResolver finds no TPU core (with tpu='local', "
        f"none is attached to this host). {USE_THE_FAKE}"
    )
