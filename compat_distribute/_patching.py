"""Replacing names in TensorFlow's namespaces, and putting TF's own objects back.

The one place that writes into `tensorflow`'s modules: `install()` routes the
TF1 strategy names through it, and the fake TPU its TPU entry points.
"""


def resolve(path):
    """The object at dotted `path` below the `tensorflow` package."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    obj = tf
    for part in path.split(".") if path else ():
        obj = getattr(obj, part)
    return obj


class Patch:
    """Sets `(path, name) -> value` routes on `start()`; `stop()` restores them.

    Restoring puts back exactly what was there, so patches of the same name
    nest if they stop in reverse order. Also a context manager.
    """

    def __init__(self, routes):
        self._routes = tuple(routes)
        self._saved = None

    @property
    def active(self):
        return self._saved is not None

    def start(self):
        if self.active:
            raise RuntimeError("this patch is already started; stop() it first.")
        saved = []
        for path, name, value in self._routes:
            owner = resolve(path)
            saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, value)
        self._saved = saved
        return self

    def stop(self):
        if not self.active:
            return
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()
