"""`TPUStrategy` with TF1's signature, over TF2's `tf.distribute.TPUStrategy`.

The resolver decides the backend. A resolver that defines
`compat_distribute_strategy(*, steps_per_run, device_assignment,
spmd_xla_partitioning)` builds its own strategy (the fake TPU in
`compat_distribute.testing` does, on virtual CPU devices); any other TPU
resolver gets a real `tf.distribute.TPUStrategy`.
"""

from compat_distribute import _input
from compat_distribute import _members
from compat_distribute import _steps
from compat_distribute import _tf
from compat_distribute import _tpu_discovery
from compat_distribute import _validate


class _TPUExtended(_input.QuietInputMixin, _tf.TPUExtended):
    """TF2's TPUExtended with the V1 extended members of the member table, and
    distributed input with no autotuning thread to join (see `_input`)."""


_members.serve(_TPUExtended, _members.TPU, _members.EXTENDED)


def _check_args(tpu_cluster_resolver, steps_per_run, device_assignment):
    _validate.cluster_resolver("tpu_cluster_resolver", tpu_cluster_resolver, tpu=True)
    if device_assignment is None and _is_device_assignment(steps_per_run):
        # TF 2.0-2.2's tf.distribute.experimental.TPUStrategy(resolver,
        # device_assignment), routed here by install(): its second argument.
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


class TPUStrategy(_steps.RunStepsMixin, _tf.TPUStrategyV2):
    """`tf.compat.v1.distribute.experimental.TPUStrategy`'s signature on TF2.

    On a real TPU this is a `tf.distribute.TPUStrategy` built with
    `experimental_device_assignment=device_assignment`; `steps_per_run` (default
    1) is kept on `strategy.extended.steps_per_run` and is the default step count
    of `run_steps`. The V1 members are served from the member table. A
    `DeviceAssignment` passed second is taken as `device_assignment`, as TF
    2.0-2.2's `tf.distribute.experimental.TPUStrategy(resolver, assignment)`
    passed it (`install()` routes that spelling here).

    With a resolver that builds its own backend (such as
    `compat_distribute.testing.FakeTPUClusterResolver`), the call returns that
    backend's strategy instead.
    """

    def __new__(cls, tpu_cluster_resolver=None, steps_per_run=None, device_assignment=None):
        steps, assignment = _check_args(tpu_cluster_resolver, steps_per_run, device_assignment)
        if tpu_cluster_resolver is None:
            # TF1's default, TPUClusterResolver(""), under its public name: inside
            # fake_tpu() that name builds the fake's resolver.
            import tensorflow as tf  # pylint: disable=g-import-not-at-top

            default = tf.distribute.cluster_resolver.TPUClusterResolver
            if hasattr(default, "compat_distribute_strategy"):
                tpu_cluster_resolver = default("")
        build = getattr(tpu_cluster_resolver, "compat_distribute_strategy", None)
        if build is not None:
            # Not an instance of cls, so Python skips __init__.
            return build(
                steps_per_run=steps,
                device_assignment=assignment,
                spmd_xla_partitioning=False,
            )
        return super().__new__(cls)

    def __init__(self, tpu_cluster_resolver=None, steps_per_run=None, device_assignment=None):
        steps, assignment = _check_args(tpu_cluster_resolver, steps_per_run, device_assignment)
        _tpu_discovery.require_tpu_for(tpu_cluster_resolver)
        super().__init__(tpu_cluster_resolver, experimental_device_assignment=assignment)
        self.extended.__class__ = _TPUExtended
        self.extended.steps_per_run = steps


_members.serve(TPUStrategy, _members.TPU, _members.STRATEGY)
