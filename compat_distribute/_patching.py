"""Replacing names in TensorFlow's namespaces, and putting TF's own objects back.

The one place that writes into `tensorflow`'s modules: `install()` routes the
TF1 strategy names through it, and the fake TPU its TPU entry points. Each name
has a stack: a started `Patch` pushes its value, the name shows the top of the
stack, and a stopped one removes its own entry wherever it sits. So patches of
the same name may start and stop in any order, and TF's original object is back
once the last one stops.
"""

import dataclasses


def tf_object(path):
    """The object at dotted `path` below the `tensorflow` package ("" for `tensorflow`)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    obj = tf
    for part in path.split(".") if path else ():
        obj = getattr(obj, part)
    return obj


@dataclasses.dataclass
class _Stack:
    owner: object
    name: str
    original: object
    entries: list  # [(patch, value)], newest last

    def show_top(self):
        if not self.entries:
            setattr(self.owner, self.name, self.original)
            return
        # The highest precedence wins; among equals, the newest.
        top = max(range(len(self.entries)), key=lambda i: (self.entries[i][0].precedence, i))
        setattr(self.owner, self.name, self.entries[top][1])


# (id(owner), name) -> _Stack; an entry lives while any patch holds the name.
_STACKS = {}


class Patch:
    """Sets `(path, name) -> value` routes on `start()`; `stop()` takes them back.

    Routes naming the same object twice (two paths to one module) count once.
    A name shows the value of the started patch with the highest `precedence`,
    the newest among equals, whatever the order of starts and stops.
    Also a context manager.
    """

    def __init__(self, routes, *, precedence=0):
        self._routes = tuple(routes)
        self.precedence = precedence
        self._keys = None

    @property
    def active(self):
        return self._keys is not None

    def start(self):
        if self.active:
            raise RuntimeError("this patch is already started; stop() it first.")
        # Resolve every path before writing anything, so a bad path changes nothing.
        targets = {}
        for path, name, value in self._routes:
            owner = tf_object(path)
            targets.setdefault((id(owner), name), (owner, name, value))
        for key, (owner, name, value) in targets.items():
            stack = _STACKS.get(key)
            if stack is None:
                stack = _STACKS[key] = _Stack(owner, name, getattr(owner, name), [])
            stack.entries.append((self, value))
            stack.show_top()
        self._keys = tuple(targets)
        return self

    def stop(self):
        if not self.active:
            return
        for key in self._keys:
            stack = _STACKS[key]
            stack.entries[:] = [(p, v) for p, v in stack.entries if p is not self]
            stack.show_top()
            if not stack.entries:
                del _STACKS[key]
        self._keys = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()
