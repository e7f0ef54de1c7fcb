"""Replacing names in TensorFlow and Keras, and putting their own objects back.

The one place that writes into other libraries: a stack per name, so patches of
one name start and stop in any order.
"""

import dataclasses
import threading


def tf_object(path):
    """The object at dotted `path` below the `tensorflow` package ("" for `tensorflow`)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    obj = tf
    for part in path.split(".") if path else ():
        obj = getattr(obj, part)
    return obj


_ABSENT = object()  # the original of a name that did not exist


@dataclasses.dataclass
class _Stack:
    owner: object
    name: str
    original: object  # what a lookup gave before the first patch
    own: object  # the owner's own entry (raw, for a class), or _ABSENT
    entries: list  # [(patch, value)], newest last

    def show_top(self):
        if not self.entries:
            if self.own is _ABSENT and self.name == "__new__" and isinstance(self.owner, type):
                # Deleted, a patched __new__ leaves the class's slot pointing at the
                # lookup of __new__ (CPython's update_one_slot), and object.__new__
                # then refuses the class's arguments: one that passes them on stays.
                setattr(self.owner, self.name, _neutral_new(self.owner))
            elif self.own is _ABSENT:  # inherited, or no such name: as it was
                delattr(self.owner, self.name)
            else:
                setattr(self.owner, self.name, self.own)
            return
        # The highest precedence wins; among equals, the newest.
        top = max(range(len(self.entries)), key=lambda i: (self.entries[i][0].precedence, i))
        setattr(self.owner, self.name, self.entries[top][1])


# (id(owner), name) -> _Stack; an entry lives while any patch holds the name.
_STACKS = {}
_LOCK = threading.Lock()


def _owner(where):
    return tf_object(where) if isinstance(where, str) else where


def _own(owner, name):
    # A class's own entry, unwrapped (a staticmethod stays one); an inherited
    # method is not the class's own, and is inherited again after the last stop.
    if isinstance(owner, type):
        own = vars(owner).get(name, _ABSENT)
        return _ABSENT if getattr(own, "neutral", False) else own
    return getattr(owner, name, _ABSENT)


def _neutral_new(cls):
    """The `__new__` a class keeps once its patched one is gone (see `_Stack`):
    builds the class as before; counts as none of its own."""
    new = forwarding_new(cls, lambda *a, **k: None)
    new.neutral = True
    return new


def original(where, name):
    """What `where.name` is with no patch started: the library's own object."""
    owner = _owner(where)
    with _LOCK:
        value = _original(owner, name)
    if value is _ABSENT:
        raise AttributeError(f"{owner!r} has no attribute {name!r} of its own")
    return value


def _original(owner, name):
    stack = _STACKS.get((id(owner), name))
    return getattr(owner, name, _ABSENT) if stack is None else stack.original


def forwarding_new(cls, target):
    """A `__new__` for `cls` (to patch in): `cls(*args, **kwargs)` builds
    `target(*args, **kwargs)(*args, **kwargs)` instead, where `target` names a
    class or factory for those arguments (None: `cls` builds as before). Its
    subclasses build as before."""

    def __new__(klass, *args, **kwargs):
        if klass is cls:
            other = target(*args, **kwargs)
            if other is not None and other is not cls:
                return other(*args, **kwargs)
        following = super(cls, klass).__new__
        if following is object.__new__:  # takes no arguments but the class
            return following(klass)
        return following(klass, *args, **kwargs)

    return __new__


def _forwarding(owner, name, value):
    """The route that makes the library's own class at `owner.name`, which the
    route `(owner, name, value)` replaces, build what `owner.name` shows at the
    time: for code that bound the class before the patch started."""
    replaced = _original(owner, name)
    if not isinstance(replaced, type):
        return None
    patched = _STACKS.get((id(replaced), "__new__"))
    if (_own(replaced, "__new__") if patched is None else patched.own) is not _ABSENT:
        return None  # A class with a __new__ of its own: not forwarded.
    if isinstance(value, type) and issubclass(value, replaced):
        return None  # Python would run __init__ on what it builds a second time.
    return (replaced, "__new__", forwarding_new(replaced, lambda *a, **k: getattr(owner, name)))


def values(where, name):
    """The values that started patches hold for `where.name`, oldest first."""
    owner = _owner(where)
    with _LOCK:
        stack = _STACKS.get((id(owner), name))
        return tuple(v for _, v in stack.entries) if stack is not None else ()


class Patch:
    """Sets `(where, name) -> value` routes on `start()`; `stop()` takes them back.

    `where` is a dotted path below `tensorflow` ("compat.v1.distribute"), or
    the module or class itself. A name that does not exist is created, and
    deleted again by the last stop. Routes naming the same object twice (two
    paths to one module) count once. A name shows the value of the started
    patch with the highest `precedence`, the newest among equals, whatever the
    order of starts and stops. Also a context manager.

    `forward_bound=True`: a class a route replaces, where code bound it before
    the start (`from tensorflow... import TPUStrategy` above `install()`),
    builds what its name shows now (`forwarding_new`).
    """

    def __init__(self, routes, *, precedence=0, forward_bound=False):
        self._routes = tuple(routes)
        self.precedence = precedence
        self._forward_bound = forward_bound
        self._keys = None

    @property
    def active(self):
        return self._keys is not None

    def start(self):
        if self.active:
            raise RuntimeError("this patch is already started; stop() it first.")
        # Resolve every path before writing anything, so a bad path changes nothing.
        targets = {}
        for where, name, value in self._routes:
            owner = _owner(where)
            targets.setdefault((id(owner), name), (owner, name, value))
        with _LOCK:
            if self._forward_bound:
                forwards = [_forwarding(*target) for target in targets.values()]
                for owner, name, value in filter(None, forwards):
                    targets.setdefault((id(owner), name), (owner, name, value))
            for key, (owner, name, value) in targets.items():
                stack = _STACKS.get(key)
                if stack is None:
                    stack = _STACKS[key] = _Stack(
                        owner, name, getattr(owner, name, _ABSENT), _own(owner, name), []
                    )
                stack.entries.append((self, value))
                stack.show_top()
            self._keys = tuple(targets)
        return self

    def stop(self):
        with _LOCK:
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
