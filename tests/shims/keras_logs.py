"""What Keras reports per batch: callbacks' logs and the progress bar.

`report(strategy, keras_module)` fits, evaluates and predicts a one-Dense
model and returns what a user sees of it, for the tests of both Kerases on the
fake TPU (in this process, or run as a program: `python keras_logs.py WHERE`
prints one JSON line for each placement WHERE names, under the Keras that
`TF_USE_LEGACY_KERAS` picks).
"""

import contextlib
import io
import json
import os
import re
import sys

import numpy as np

BATCH = 64
EXAMPLES = 128  # two batches
WEIGHTS = np.array([[1.0], [2.0], [3.0]], "float32")


def data():
    """Inputs whose rows differ, so each replica's share of a batch has its own loss."""
    x = np.random.RandomState(0).randn(EXAMPLES, 3).astype("float32")
    return x, x @ WEIGHTS


class _Logs:
    """A callback recording every per-batch logs dict (Keras' Callback is mixed in)."""

    def __init__(self):
        super().__init__()
        self.seen = {"train": [], "test": [], "predict": []}

    def on_train_batch_end(self, batch, logs=None):
        self.seen["train"].append({k: float(v) for k, v in logs.items()})

    def on_test_batch_end(self, batch, logs=None):
        self.seen["test"].append({k: float(v) for k, v in logs.items()})

    def on_predict_batch_end(self, batch, logs=None):
        self.seen["predict"].append(np.asarray(logs["outputs"]).ravel().tolist())


_PROGRESS = re.compile(r"(\d+)/\d+ .*? - loss: ([0-9.]+) - mae: ([0-9.]+)")
_STYLE = re.compile(r"\x1b\[[0-9;]*m")  # Keras 3's colours and bold


def _progress_bar(text):
    """(batch, loss, mae) of each batch fit's progress bar showed (an epoch's last
    batch may be drawn twice, as it ends)."""
    found = (_PROGRESS.search(part) for part in _STYLE.sub("", text).split("\r"))
    shown = []
    for update in ((int(m.group(1)), float(m.group(2)), float(m.group(3))) for m in found if m):
        if not shown or update != shown[-1]:
            shown.append(update)
    return shown


def report(strategy, keras_module):
    """What `fit`, `evaluate` and `predict` show of one model under `strategy`."""
    k = keras_module
    x, y = data()
    logs = type("Logs", (_Logs, k.callbacks.Callback), {})()
    with strategy.scope():
        model = k.Sequential([k.Input((3,)), k.layers.Dense(1, kernel_initializer="ones")])
        model.compile(optimizer=k.optimizers.SGD(0.01), loss="mse", metrics=["mae"])
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        history = model.fit(
            x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=1, callbacks=[logs]
        )
    evaluated = model.evaluate(x, y, batch_size=BATCH, verbose=0, callbacks=[logs])
    predicted = model.predict(x, batch_size=BATCH, verbose=0, callbacks=[logs])
    return {
        "replicas": strategy.num_replicas_in_sync,
        "batch_logs": logs.seen,
        "progress_bar": _progress_bar(shown.getvalue()),
        "epochs": history.history,
        "evaluate": [float(v) for v in evaluated],
        "predict": np.asarray(predicted).ravel().tolist(),
    }


def first_batch_metrics(rows):
    """(loss, mae) of the first `rows` examples of the first batch, before any update.

    `rows=BATCH` is what one device logs for the first batch. Keras 3 reads its
    sync-on-read metrics inside the replica, so on a TPU it logs replica 0's
    share: `rows=BATCH // replicas`.
    """
    x, y = data()
    error = x[:rows].sum(axis=1, keepdims=True) - y[:rows]  # a kernel of ones, no bias
    return float(np.mean(error**2)), float(np.mean(np.abs(error)))


def _strategy(where):
    import tensorflow as tf

    import compat_distribute
    from compat_distribute import testing

    if where == "one-device":
        return contextlib.nullcontext(tf.distribute.get_strategy())
    if where.startswith("shim:"):
        resolver = testing.FakeTPUClusterResolver(where.removeprefix("shim:"))
        return contextlib.nullcontext(compat_distribute.TPUStrategy(resolver))
    topology, _, hosts = where.partition(":hosts=")
    return _under_fake_tpu(topology, int(hosts) if hosts else None)


@contextlib.contextmanager
def _under_fake_tpu(topology, hosts):
    import tensorflow as tf

    from compat_distribute import testing

    with testing.fake_tpu(topology, hosts=hosts):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        yield tf.distribute.TPUStrategy(resolver)


def main(placements):
    """Prints `RESULT {json}` for each placement ("one-device", "v3-8",
    "shim:v3-8", a pod such as "v4-16", or one on one host: "v3-32:hosts=1")."""
    from compat_distribute.testing import set_virtual_devices

    set_virtual_devices(32 if any("hosts=1" in p for p in placements) else 8)
    import tensorflow as tf

    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        keras_module = tf.keras
    else:
        import keras as keras_module
    for where in placements:
        with _strategy(where) as strategy:
            out = report(strategy, keras_module)
        print("RESULT " + json.dumps(dict(out, where=where)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
