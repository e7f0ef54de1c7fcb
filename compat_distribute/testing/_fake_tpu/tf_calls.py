"""TensorFlow's own TPU calls given a fake resolver, outside `fake_tpu()` too.

The public `FakeTPUClusterResolver` is exported from here, so the hook is added
before any resolver is made, and the resolver's module need not know this one.
"""

import functools

from compat_distribute import _patching
from compat_distribute import tpu as tpu_shim
from compat_distribute.testing import _tf
from compat_distribute.testing._fake_tpu import resolver as resolver_lib
from compat_distribute.testing._fake_tpu import strategy as strategy_lib
from compat_distribute.testing._fake_tpu import system
from compat_distribute.testing._fake_tpu.resolver import FakeTPUClusterResolver

__all__ = ("FakeTPUClusterResolver", "take_fake_resolvers")


def _fake_or_default(resolver):
    """Whether TensorFlow's own TPU code given `resolver` is meant for a fake."""
    return system.is_fake(resolver) or (resolver is None and bool(system.ACTIVE))


def _taking_fakes(tf_call, fake_call):
    """TensorFlow's TPU system call `tf_call(cluster_resolver, tpu_cluster_resolver_cls)`,
    with `fake_call` for a fake resolver (or none, inside `fake_tpu()`)."""

    @functools.wraps(tf_call)
    def call(cluster_resolver, tpu_cluster_resolver_cls):
        if _fake_or_default(cluster_resolver):
            return fake_call(cluster_resolver)
        return tf_call(cluster_resolver, tpu_cluster_resolver_cls)

    return call


def _strategy_for(fake_class):
    """A `forwarding_new` target: `fake_class` for a fake resolver (or none, inside
    `fake_tpu()`), else TensorFlow's class."""
    return lambda tpu_cluster_resolver=None, *a, **k: (
        fake_class if _fake_or_default(tpu_cluster_resolver) else None
    )


_TAKING_FAKES = []  # The patch, once started: it stays.


def take_fake_resolvers():
    """Makes TensorFlow's own TPU entry points take a fake resolver, for good.

    Outside `fake_tpu()`, or through names bound before it, a fake resolver
    reaches TensorFlow's own `initialize_tpu_system` (an AssertionError with
    no text) and TPUStrategy classes (an IndexError): from the first fake
    resolver on, those calls initialise the fake and build its strategies.
    Any other resolver gets TensorFlow's own. Idempotent.
    """
    if _TAKING_FAKES:
        return
    util = _tf.tpu_strategy_util
    routes = [
        (util, f"{name}_impl", _taking_fakes(_patching.original(util, f"{name}_impl"), fake_call))
        for name, fake_call in (
            ("initialize_tpu_system", system.initialize_tpu_system),
            ("shutdown_tpu_system", system.shutdown_tpu_system),
        )
    ]
    strategies = (
        ("distribute", strategy_lib.FakeTPUStrategy),
        ("distribute.experimental", strategy_lib.ExperimentalFakeTPUStrategy),
        ("compat.v1.distribute.experimental", tpu_shim.TPUStrategy),  # TF1's signature
    )
    for path, fake_class in strategies:
        tf_class = _patching.original(path, "TPUStrategy")
        routes.append(
            (tf_class, "__new__", _patching.forwarding_new(tf_class, _strategy_for(fake_class)))
        )
    # Below fake_tpu()'s routes, which build what a name shows inside it.
    _TAKING_FAKES.append(_patching.Patch(routes, precedence=-1).start())


resolver_lib.ON_CREATE.append(take_fake_resolvers)
