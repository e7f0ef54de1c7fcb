"""`FakeTPUStrategy`: `tf.distribute.TPUStrategy` on a fake TPU's logical devices.

A MirroredStrategy, never a TPUStrategy (TensorFlow and Keras would emit TPU-only
ops); TF's own checks serve where TF has them as functions.
"""

import tensorflow as tf

from compat_distribute import _members
from compat_distribute import _steps
from compat_distribute import keras as cd_keras
from compat_distribute import _validate
from compat_distribute.testing import _tf
from compat_distribute.testing._fake_tpu import keras_tpu
from compat_distribute.testing._fake_tpu import outside_compilation
from compat_distribute.testing._fake_tpu import replicate
from compat_distribute.testing._fake_tpu import system


class FakeTPUStrategy(_steps.RunStepsMixin, tf.distribute.MirroredStrategy):
    """`tf.distribute.TPUStrategy` on a `FakeTPUClusterResolver`'s logical devices.

    Same signature as TF2's TPUStrategy. One replica per core, or per replica of
    `experimental_device_assignment`; each replica runs on the device of its
    logical core 0 (the other cores of a replica are annotated, as XLA sees
    them, but do not compute). Variables are packed in eager mode, as
    TPUStrategyV2's (`_enable_packed_variable_in_eager_mode`, which may be set
    to False as TF's tests do). Serves the V1 members of the member table, and
    `run_steps` (see docs/migration.md).
    """

    def __init__(
        self,
        tpu_cluster_resolver=None,
        experimental_device_assignment=None,
        experimental_spmd_xla_partitioning=False,
    ):
        resolver = system.fake_resolver("tpu_cluster_resolver", tpu_cluster_resolver)
        _validate.device_assignment(experimental_device_assignment)
        if not isinstance(experimental_spmd_xla_partitioning, bool):
            raise TypeError(
                f"experimental_spmd_xla_partitioning must be True or False; got "
                f"{experimental_spmd_xla_partitioning!r}."
            )
        self._init(
            resolver,
            experimental_device_assignment,
            experimental_spmd_xla_partitioning,
            steps_per_run=1,
        )

    def _init(self, resolver, device_assignment, spmd, steps_per_run):
        """Builds the strategy from checked arguments (see `build`)."""
        # The one check only the fake can make: the assignment fits its slice.
        resolver.check_device_assignment(device_assignment)
        # Own collective keys: strategies over other device sets never share a group.
        _tf.give_own_collective_keys(self)
        extended = replicate.ReplicatingExtended(
            self, resolver, device_assignment, spmd, steps_per_run
        )
        # Skips MirroredStrategy.__init__, which would build a MirroredExtended.
        _tf.Strategy.__init__(self, extended)
        keras_tpu.attach(self)
        if steps_per_run > 1:
            # Keras' compile under this scope takes steps_per_run as steps_per_execution.
            cd_keras.compile_takes_steps_per_run()
        # TPUStrategyV2's default: one packed handle per variable in eager mode.
        # Not on a pod: its step passes each host the handles of its own copies.
        self._enable_packed_variable_in_eager_mode = resolver.pod is None
        self._checked_keys = set()  # step functions strict mode passed
        self._checked_calls = set()  # (fn, arity) whose run arguments passed

    def scope(self):
        keras_tpu.recognise()  # a Keras imported since this strategy was built
        return super().scope()

    # Not marked do_not_convert: that would also switch AutoGraph off for `fn`.
    def run(self, fn, args=(), kwargs=None, options=None):
        """`TPUStrategy.run`: `fn` must be a `tf.function` or run inside one.

        Returns one output per replica, as a TPU does: a tensor or a composite
        (an ExtensionType too) that is the same object in every replica (a
        pass-through input) comes back as a `PerReplica` with a copy on each
        replica's device (one replica's
        outputs come back as they are, as from TF's regroup).
        """
        _tf.validate_run_function(fn)
        # TPUStrategy's argument checks (variables in *args, too many args).
        self._check_run_arguments(fn, args, kwargs)
        self._check_traced(fn, args, kwargs)
        self.extended._runs_in_progress += 1  # pylint: disable=protected-access
        try:
            with outside_compilation.in_steps():
                outputs = super().run(fn, args=args, kwargs=kwargs, options=options)
        finally:
            self.extended._runs_in_progress -= 1  # pylint: disable=protected-access
        if self.num_replicas_in_sync == 1:
            return outputs  # TF's regroup unwraps the outputs of one replica.
        return tf.nest.map_structure(self._per_replica, outputs)

    def _per_replica(self, output):
        if isinstance(output, tf.distribute.DistributedValues) or not (
            tf.is_tensor(output) or isinstance(output, _tf.CompositeTensor)
        ):
            return output
        copies = []
        for device in self.extended.worker_devices:
            with tf.device(device):
                # A composite (an ExtensionType too) is copied component by component.
                copies.append(tf.nest.map_structure(tf.identity, output, expand_composites=True))
        return _tf.PerReplica(tuple(copies))

    def _check_run_arguments(self, fn, args, kwargs):
        """TPUStrategy.run's argument checks: variables in *args, too many args.

        TF's check inspects `fn`'s signature; an eager call repeating a passed
        (fn, arity) without variables skips it, to keep `run` as cheap as
        MirroredStrategy's.
        """
        key = None
        if tf.executing_eagerly() and not any(
            isinstance(a, _tf.DistributedVariable)
            for a in tf.nest.flatten((args, kwargs or {}))
        ):
            fn_key = _steps._fn_key(fn)  # pylint: disable=protected-access
            key = (fn_key, len(args), tuple(kwargs or ()))
            try:
                if key in self._checked_calls:
                    return
            except TypeError:  # unhashable callable
                key = None
        _tf.maybe_partial_apply_variables(fn, args, kwargs)
        if key is not None:
            self._checked_calls.add(key)

    def _check_traced(self, fn, args, kwargs):
        """Strict mode: checks `fn` compiles for a TPU, once per step function.

        Called whenever `run` is called, which inside a `tf.function` is at
        trace time. Does nothing unless the resolver is strict. A step that
        fails is checked again at its next call, as a TPU compiles it again.
        """
        if not self.extended.strict:
            return
        from compat_distribute.testing.xla_check import check as xla_check  # pylint: disable=g-import-not-at-top

        if xla_check.tracing():  # The check's own trace of a step: checked by the caller.
            return
        key = _steps._fn_key(fn)  # pylint: disable=protected-access
        try:
            if key in self._checked_keys:
                return
            self._checked_keys.add(key)
        except TypeError:  # unhashable callable: check every time.
            key = None
        # Traced as strategy.run would trace it, inside the caller's trace, so
        # distributed arguments are captured as they are.
        try:
            xla_check.ensure_tpu_compatible(fn, args, kwargs, strategy=self)
        except BaseException:
            self._checked_keys.discard(key)
            raise

    @property
    def cluster_resolver(self):
        return self.extended._tpu_cluster_resolver  # pylint: disable=protected-access

    # TPUStrategyV2's own code; reads extended._tpu_devices and
    # extended._use_spmd_for_xla_partitioning. Its errors lead in a traced step.
    experimental_assign_to_logical_device = _validate.errors_lead(
        _tf.TPUStrategyV2.experimental_assign_to_logical_device
    )
    experimental_split_to_logical_devices = _validate.errors_lead(
        _tf.TPUStrategyV2.experimental_split_to_logical_devices
    )
    experimental_replicate_to_logical_devices = _validate.errors_lead(
        _tf.TPUStrategyV2.experimental_replicate_to_logical_devices
    )


_members.serve(FakeTPUStrategy, _members.TPU, _members.STRATEGY)


class ExperimentalFakeTPUStrategy(FakeTPUStrategy):
    """`tf.distribute.experimental.TPUStrategy(tpu_cluster_resolver, device_assignment)`."""

    def __init__(self, tpu_cluster_resolver=None, device_assignment=None):
        super().__init__(tpu_cluster_resolver, experimental_device_assignment=device_assignment)


def build(resolver, *, steps_per_run, device_assignment, spmd_xla_partitioning):
    """The fake's `compat_distribute.tpu.TPUBackend`: a `FakeTPUStrategy` of `resolver`.

    `compat_distribute.TPUStrategy` has checked the arguments (see
    `TPUBackend`); only the assignment's fit to the slice is checked here.
    """
    strategy = FakeTPUStrategy.__new__(FakeTPUStrategy)
    strategy._init(  # pylint: disable=protected-access
        resolver, device_assignment, spmd_xla_partitioning, steps_per_run
    )
    return strategy
