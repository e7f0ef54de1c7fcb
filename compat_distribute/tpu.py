"""`TPUStrategy` with TF1's signature, over TF2's `tf.distribute.TPUStrategy`.

The resolver names its backend (`TPUBackend`), so the core never imports the fake.
"""

import contextlib
import typing
import weakref

from compat_distribute import _input
from compat_distribute import _lazy
from compat_distribute import _members
from compat_distribute import _steps
from compat_distribute import _tf
from compat_distribute import _tpu_discovery
from compat_distribute import _validate
from compat_distribute import keras


class _TPUExtended(_input.QuietInputMixin, _tf.TPUExtended):
    """TF2's TPUExtended with the V1 extended members of the member table, and
    distributed input with no autotuning thread to join (see `_input`)."""


_members.serve(_TPUExtended, _members.TPU, _members.EXTENDED)


class TPUBackend(typing.Protocol):
    """The plug-in point for TPU backends: what builds the strategy for a resolver.

    A resolver class opts in by naming its backend in the class attribute
    `BACKEND_ATTRIBUTE`, as a `"package.module:function"` path that is imported
    on first use (so the core never imports a backend, and a backend may import
    the core). `TPUStrategy(resolver, steps_per_run, device_assignment)` checks
    its arguments, then returns `backend(resolver, ...)`: `steps_per_run` is an
    int >= 1, `device_assignment` None or a `tf.tpu.experimental.DeviceAssignment`,
    `spmd_xla_partitioning` a bool. The backend checks only what it alone knows
    (for example, that the assignment fits its slice).
    """

    def __call__(
        self, resolver, *, steps_per_run: int, device_assignment, spmd_xla_partitioning: bool
    ): ...


# The resolver class attribute naming its `TPUBackend` ("package.module:function").
BACKEND_ATTRIBUTE = "compat_distribute_backend"


def backend_of(resolver) -> TPUBackend | None:
    """The `TPUBackend` a resolver (or resolver class) names; None for TensorFlow's TPU."""
    path = getattr(resolver, BACKEND_ATTRIBUTE, None)
    return None if path is None else _lazy.load(path)


def is_tpu_resolver(value):
    """True for TensorFlow's TPU resolver and for resolvers that name a `TPUBackend`."""
    if value is None:
        return False
    if getattr(value, BACKEND_ATTRIBUTE, None) is not None:
        return True
    import tensorflow as tf

    return isinstance(value, tf.distribute.cluster_resolver.TPUClusterResolver)


def _check_args(tpu_cluster_resolver, steps_per_run, device_assignment, num_cores=None):
    if num_cores is not None:
        raise TypeError(
            f"TPUStrategy(): num_cores={_validate.show(num_cores)} is TF 1.12's argument, "
            f"which TF 1.13 replaced with device_assignment. Drop it to use every core of "
            f"the TPU (what num_cores=None did), or pass device_assignment="
            f"tf.tpu.experimental.DeviceAssignment.build(topology, num_replicas=N) to use N."
        )
    _validate.cluster_resolver(
        "tpu_cluster_resolver",
        tpu_cluster_resolver,
        tpu=True,
        is_tpu=is_tpu_resolver(tpu_cluster_resolver),
    )
    if _is_device_assignment(steps_per_run):
        # TF 2.0-2.2's tf.distribute.experimental.TPUStrategy(resolver,
        # device_assignment), routed here by install(): its second argument.
        if device_assignment is not None:
            raise TypeError(
                f"TPUStrategy() got multiple values for argument 'device_assignment': a "
                f"DeviceAssignment second (where TF1 takes steps_per_run, and TF 2.0-2.2 "
                f"took the assignment) and device_assignment={_validate.show(device_assignment)}"
                f". Pass it once: TPUStrategy(resolver, steps_per_run=N, device_assignment=...)."
            )
        steps_per_run, device_assignment = None, steps_per_run
    return (
        _validate.steps_per_run(steps_per_run),
        _validate.device_assignment(device_assignment),
    )


def _is_device_assignment(value):
    if value is None or isinstance(value, (int, str, float)):
        return False
    import tensorflow as tf

    return isinstance(value, tf.tpu.experimental.DeviceAssignment)


# The strategies backends built when asked for a TPUStrategy: its instances too.
_BUILT_BY_BACKENDS = weakref.WeakSet()


class _TPUStrategyType(type):
    """`isinstance(strategy, TPUStrategy)` holds for a strategy a backend built
    for this class (a fake TPU's), as for one TF1 code built by this name."""

    def __instancecheck__(cls, instance):
        return super().__instancecheck__(instance) or instance in _BUILT_BY_BACKENDS


class TPUStrategy(_steps.RunStepsMixin, _tf.TPUStrategyV2, metaclass=_TPUStrategyType):
    """`tf.compat.v1.distribute.experimental.TPUStrategy`'s signature on TF2.

    On a real TPU this is a `tf.distribute.TPUStrategy` built with
    `experimental_device_assignment=device_assignment`; `steps_per_run` (default
    1) is kept on `strategy.extended.steps_per_run` and is the default step count
    of `run_steps`. The V1 members are served from the member table. A
    `DeviceAssignment` passed second is taken as `device_assignment`, as TF
    2.0-2.2's `tf.distribute.experimental.TPUStrategy(resolver, assignment)`
    passed it (`install()` routes that spelling here). TF 1.12's `num_cores`
    is refused, naming `device_assignment`, which replaced it.

    With a resolver that builds its own backend (such as
    `compat_distribute.testing.FakeTPUClusterResolver`), the call returns that
    backend's strategy instead.
    """

    def __new__(
        cls, tpu_cluster_resolver=None, steps_per_run=None, device_assignment=None, *, num_cores=None
    ):
        steps, assignment = _check_args(
            tpu_cluster_resolver, steps_per_run, device_assignment, num_cores
        )
        if tpu_cluster_resolver is None:
            # TF1's default, TPUClusterResolver(""), under its public name: inside
            # fake_tpu() that name builds the fake's resolver.
            import tensorflow as tf  # pylint: disable=g-import-not-at-top

            default = tf.distribute.cluster_resolver.TPUClusterResolver
            if getattr(default, BACKEND_ATTRIBUTE, None) is not None:
                tpu_cluster_resolver = default("")
        backend = backend_of(tpu_cluster_resolver)
        if backend is not None:
            # Not of class cls, so Python skips __init__ (isinstance holds:
            # see _TPUStrategyType).
            strategy = backend(
                tpu_cluster_resolver,
                steps_per_run=steps,
                device_assignment=assignment,
                spmd_xla_partitioning=False,
            )
            with contextlib.suppress(TypeError):  # an object no weak reference can name
                _BUILT_BY_BACKENDS.add(strategy)
            return strategy
        return super().__new__(cls)

    def __init__(
        self, tpu_cluster_resolver=None, steps_per_run=None, device_assignment=None, *, num_cores=None
    ):
        del num_cores  # Refused by __new__.
        steps, assignment = _check_args(tpu_cluster_resolver, steps_per_run, device_assignment)
        _tpu_discovery.require_tpu_for(tpu_cluster_resolver)
        super().__init__(tpu_cluster_resolver, experimental_device_assignment=assignment)
        self.extended.__class__ = _TPUExtended
        self.extended.steps_per_run = steps
        if steps > 1:
            # Keras' compile under this scope takes steps_per_run as steps_per_execution.
            keras.compile_takes_steps_per_run()


_members.serve(TPUStrategy, _members.TPU, _members.STRATEGY)
