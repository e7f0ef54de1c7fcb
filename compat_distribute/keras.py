"""Keras under the shims: TF1's `steps_per_run` as Keras' `steps_per_execution`.

Also `multi_step_fix()` for Keras 3's failure with several steps per execution on
2+ replicas (keras-team/keras#19246). Imports Keras only when called.
"""

import functools
import inspect
import os
import sys

from compat_distribute import _patching
from compat_distribute import _user_line
from compat_distribute import _validate

# Public (docs/keras.md). compile_takes_steps_per_run, multi_step_fix_started and
# tf_keras_version serve the shims and the fake TPU: internal.
__all__ = (
    "KerasStepsWarning",
    "MultiStepFix",
    "keras_compile_kwargs",
    "keras_major_version",
    "multi_step_fix",
    "steps_per_execution",
)

_KERAS_ISSUE = "keras-team/keras#19246"
ON_UNSUPPORTED = ("warn", "raise")


class KerasStepsWarning(UserWarning):
    """steps_per_run could not become steps_per_execution; 1 is used."""


def keras_major_version(model):
    """The major version (2 or 3) of the Keras that `model`'s class belongs to.

    Read from the model's own class, not from the environment: with both `keras`
    and `tf-keras` installed, `tf.keras` is either, depending on
    `TF_USE_LEGACY_KERAS` when TensorFlow was first imported.
    """
    for cls in type(model).__mro__:
        if cls.__name__ not in ("Model", "Functional", "Sequential"):
            continue
        top = cls.__module__.split(".")[0]
        if top == "tensorflow" and ".keras." in cls.__module__:
            return 2
        if top in ("keras", "tf_keras"):
            version = getattr(sys.modules.get(top), "__version__", "")
            major = version.split(".")[0]
            if major.isdigit():
                return int(major)
    raise TypeError(
        f"model must be a Keras model (keras.Model, or tf_keras.Model for Keras 2); got "
        f"{_validate.show(model)}. Pass the model you compile: "
        f"keras_compile_kwargs(strategy, model)."
    )


def _tensorflow_version():
    """(major, minor) of the installed TensorFlow."""
    import tensorflow as tf

    major, minor = tf.__version__.split(".")[:2]
    return int(major), int(minor)


# As TensorFlow 2.16+ reads it, when `tf.keras` is first used.
_LEGACY_KERAS_VALUES = ("true", "True", "1")


def tf_keras_version():
    """The major version (2 or 3) of the Keras that `tf.keras` is: the Keras in use.

    Keras 2 on TensorFlow 2.15 and older. From 2.16, Keras 3, unless
    `TF_USE_LEGACY_KERAS` is "1" or "true", which makes `tf.keras` the
    `tf-keras` package (Keras 2).
    """
    if _tensorflow_version() < (2, 16):
        return 2
    return 2 if os.environ.get("TF_USE_LEGACY_KERAS") in _LEGACY_KERAS_VALUES else 3


def _keras_2_advice():
    """How to train this model with Keras 2, for the Keras in use."""
    if tf_keras_version() == 3:
        return (
            "use Keras 2 (tf-keras of your TensorFlow's version, the [legacy] extra, with "
            "TF_USE_LEGACY_KERAS=1)"
        )
    major, minor = _tensorflow_version()
    why = (
        f"on TensorFlow {major}.{minor}"
        if (major, minor) < (2, 16)
        else "with TF_USE_LEGACY_KERAS set"
    )
    return f"build the model with tf.keras, which is Keras 2 {why}"


def _check_on_unsupported(on_unsupported):
    if not isinstance(on_unsupported, str) or on_unsupported not in ON_UNSUPPORTED:
        raise ValueError(
            f"on_unsupported must be one of {ON_UNSUPPORTED}; got "
            f"{_validate.show(on_unsupported)}. Pass 'warn' to use "
            f"steps_per_execution=1 with a KerasStepsWarning, or 'raise' for a ValueError."
        )


def _hits_keras_multi_step_bug(strategy):
    from compat_distribute import _tf

    # CollectiveAllReduceExtended (multi-worker) and the fake TPU's extended
    # are MirroredExtended too. With 2+ replicas their all-reduce is a
    # collective whose instance key is a call-time capture, except where it
    # goes through one device (a fake TPU pod, cross_device_ops given). The
    # fake TPU starts a fix for its own collectives (see `MultiStepFix`).
    return (
        isinstance(strategy.extended, _tf.MirroredExtended)
        and strategy.num_replicas_in_sync > 1
        and _tf.all_reduces_with_collectives(strategy.extended)
        and not multi_step_fix_started(strategy)
    )


def steps_per_execution(strategy, model=None, *, on_unsupported="warn"):
    """Keras' `steps_per_execution` for `model` under `strategy`: its `steps_per_run`.

    1 when the strategy has no `steps_per_run`. Where Keras 3 cannot run several
    steps per execution on `strategy` (see the module docstring) and
    `multi_step_fix()` is not started, warns with `KerasStepsWarning` and
    returns 1, or raises `ValueError` when `on_unsupported="raise"`. `model` is
    needed only to tell Keras 2 from Keras 3 in that case.
    """
    return _steps_per_execution(strategy, model, on_unsupported)


def _steps_per_execution(strategy, model, on_unsupported):
    _validate.strategy(strategy, hint="Pass the strategy whose scope builds the model.")
    _check_on_unsupported(on_unsupported)
    keras = None if model is None else keras_major_version(model)
    # The shims check steps_per_run when built; other strategies have none.
    steps = getattr(strategy.extended, "steps_per_run", None) or 1
    if steps == 1 or keras == 2 or not _hits_keras_multi_step_bug(strategy):
        return steps
    if keras is None:
        raise TypeError(
            f"steps_per_execution needs the model for steps_per_run={steps} on "
            f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replicas: "
            f"Keras 2 (tf-keras) runs {steps} steps per execution there, Keras 3 "
            f"cannot ({_KERAS_ISSUE}). Pass it: keras_compile_kwargs(strategy, model)."
        )
    message = (
        f"steps_per_run={steps} cannot become Keras' steps_per_execution on "
        f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replicas: "
        f"Keras 3 fails in fit() with 'You must feed a value for placeholder "
        f"tensor' when steps_per_execution > 1 on a MirroredStrategy-based strategy "
        f"with 2 or more replicas ({_KERAS_ISSUE})."
    )
    remedy = (
        f" To keep steps_per_execution={steps}, start "
        f"compat_distribute.keras.multi_step_fix() before this call and keep it "
        f"started through fit(), or {_keras_2_advice()}."
    )
    if on_unsupported == "raise":
        raise ValueError(
            message + remedy + " Or compile with steps_per_execution=1, or build the "
            "strategy with steps_per_run=1."
        )
    # At the user's line: the helper's caller, or the caller of model.compile.
    _user_line.warn_at_user_line(
        message + " Using steps_per_execution=1: the same training, one step per call."
        + remedy,
        KerasStepsWarning,
    )
    return 1


def keras_compile_kwargs(strategy, model=None, *, on_unsupported="warn"):
    """`{"steps_per_execution": steps_per_execution(strategy, model)}`, for `model.compile`."""
    return {"steps_per_execution": _steps_per_execution(strategy, model, on_unsupported)}


# --- compile() under a strategy with steps_per_run ---------------------------


def _compile_taking_steps_per_run(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def compile(self, *args, **kwargs):  # pylint: disable=redefined-builtin
        try:
            given = signature.bind(self, *args, **kwargs).arguments
        except TypeError:
            given = None  # Keras' own call reports the bad arguments
        # Keras compiling its own copies (tf-keras' per-replica clones in a TF1
        # graph) is not the user's call.
        caller = sys._getframe(1).f_globals.get("__name__", "")  # pylint: disable=protected-access
        if (
            given is not None
            and "steps_per_execution" not in given
            and caller.split(".")[0] not in ("keras", "tf_keras")
        ):
            import tensorflow as tf

            strategy = getattr(self, "distribute_strategy", None) or tf.distribute.get_strategy()
            steps = getattr(strategy.extended, "steps_per_run", None) or 1
            if steps > 1 and tf.compat.v1.executing_eagerly_outside_functions():
                kwargs["steps_per_execution"] = _steps_per_execution(strategy, self, "warn")
            elif steps > 1 and not type(strategy).__name__.startswith("TPUStrategy"):
                _warn_graph_fit_runs_one_step(strategy, steps)
        return original(self, *args, **kwargs)

    return compile


def _warn_graph_fit_runs_one_step(strategy, steps):
    # tf-keras' TF1 fit loops over steps_per_run only for classes it takes for
    # TPUStrategy (by name), as TF 1.15's Keras did; the fake TPU is not one.
    _user_line.warn_at_user_line(
        f"steps_per_run={steps} is not used by tf-keras' TF1 graph-mode fit() on "
        f"{type(strategy).__name__}: it runs one step per call (the same training, "
        f"more host round trips). To run {steps} steps per device loop, fit eagerly "
        f"(without tf.compat.v1.disable_v2_behavior()): compile then takes "
        f"steps_per_execution={steps}.",
        KerasStepsWarning,
    )


# tf-keras' TF1 (graph-mode) Model, which overrides compile.
_TF_KERAS_V1_MODEL = "tf_keras.src.engine.training_v1"


_COMPILE_PATCHES = {}  # the class defining compile -> its started Patch


def compile_takes_steps_per_run():
    """Makes `compile` take `steps_per_execution` from the strategy's `steps_per_run`.

    For `tf.keras` and every other Keras imported so far: `model.compile(...)`
    without `steps_per_execution`, for a model built under a strategy whose
    `extended.steps_per_run` is above 1, gets `steps_per_execution(strategy,
    model)`, which warns at the `compile` line where Keras 3 cannot run that
    many steps per execution. A call that sets `steps_per_execution` is left
    as it is. In a TF1 graph, where tf-keras runs one step per call on any
    strategy it does not take for a TPUStrategy (the fake TPU), it warns.

    The TPU shim and the fake TPU call this when built with `steps_per_run > 1`;
    it stays on for the process (through the patch registry `_patching`).
    Calling it again patches the Keras imported since.
    """
    import tensorflow as tf

    models = [tf.keras.Model]  # the Keras in use (TensorFlow imports it)
    models += [sys.modules[name].Model for name in ("keras", "tf_keras", _TF_KERAS_V1_MODEL)
               if hasattr(sys.modules.get(name), "Model")]
    for model in models:
        owner = next(c for c in model.__mro__ if "compile" in vars(c))
        if owner not in _COMPILE_PATCHES:
            patched = _compile_taking_steps_per_run(vars(owner)["compile"])
            _COMPILE_PATCHES[owner] = _patching.Patch([(owner, "compile", patched)]).start()


# --- The fix for keras-team/keras#19246 -------------------------------------
#
# A collective all-reduce traced in a tf.function takes its instance key as a
# call-time capture (FuncGraph.capture_call_time_value): a placeholder fed with
# a fresh key each time the function is called. When that function is called
# inside another function's graph, the capture is re-taken in the caller's
# graph. Keras 3 calls its one-step tf.function inside a tf.cond in a
# tf.while_loop; tf.while_loop passes call-time captures of its body on, but
# tf.cond drops those of its branches, so the key's placeholder is never fed.
# TensorFlow's collective launcher already steps out of control-flow graphs for
# its own capture; the fix does the same for the re-taken one.

def _capture_outside_control_flow(original):
    @functools.wraps(original)
    def capture_call_time_value(self, closure, spec, key=None, default_value=None,
                                placeholder=None):
        graph = self
        # A given placeholder (SavedModel loading) belongs to this graph: keep it.
        if placeholder is None and _fixes_capture(closure):
            while (
                getattr(graph, "is_control_flow_graph", False)
                and getattr(graph.outer_graph, "building_function", False)
            ):
                graph = graph.outer_graph
        if graph is self:
            return original(self, closure, spec, key, default_value, placeholder)
        # The control-flow graph captures the returned placeholder by value,
        # as it captures any tensor of an enclosing graph.
        with graph.as_default():
            return original(graph, closure, spec, key, default_value, placeholder)

    return capture_call_time_value


_CAPTURE = "capture_call_time_value"
_fixed_capture = []  # the one patched method, made on first use
_started_fixes = []  # the started MultiStepFix objects, which the method reads


def _fix_value():
    """The patched method, one object for every `MultiStepFix`."""
    from compat_distribute import _tf

    if not _fixed_capture:
        original = _patching.original(_tf.FuncGraph, _CAPTURE)
        _fixed_capture.append(_capture_outside_control_flow(original))
    return _fixed_capture[0]


def _fixes_capture(closure):
    """Whether a started fix covers the call-time capture made by `closure`."""
    scopes = [fix._keys for fix in tuple(_started_fixes)]  # pylint: disable=protected-access
    if any(keys is None for keys in scopes):
        return True
    if not scopes:
        return False
    from compat_distribute import _tf

    keys = _tf.capture_collective_keys(closure)
    return keys is not None and any(keys is k for k in scopes)


class MultiStepFix:
    """Lets Keras 3 run `steps_per_execution > 1` on 2+ replicas; start() / stop().

    While started, a call-time capture taken inside a `tf.cond` or
    `tf.while_loop` branch is taken in the enclosing function's graph instead
    (TensorFlow's `FuncGraph.capture_call_time_value`, replaced through the
    patch registry `_patching`), so the collective instance keys of Keras 3's
    one-step function are fed, and those of a variable a step creates.
    `strategy=None` fixes every strategy's collectives; a MirroredStrategy-based
    `strategy` (the fake TPU starts one for itself) only its own. Starts nest:
    TensorFlow's method is back when the last started fix stops. It must be
    started while Keras traces its train and test functions (the first `fit` /
    `evaluate`). Also a context manager.
    """

    def __init__(self, strategy=None):
        self._keys = None if strategy is None else _collective_keys_of(strategy)
        self._patch = None

    @property
    def started(self):
        return self._patch is not None

    def start(self):
        if self.started:
            raise RuntimeError("this MultiStepFix is already started; stop() it first.")
        from compat_distribute import _tf

        self._patch = _patching.Patch([(_tf.FuncGraph, _CAPTURE, _fix_value())]).start()
        _started_fixes.append(self)
        return self

    def stop(self):
        if self.started:
            _started_fixes.remove(self)
            self._patch.stop()
            self._patch = None

    def covers(self, strategy):
        """Whether this fix, once started, fixes `strategy`'s collectives."""
        return self._keys is None or self._keys is _collective_keys_of(strategy, None)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()


_NO_KEYS = object()


def _collective_keys_of(strategy, default=_NO_KEYS):
    from compat_distribute import _tf

    _validate.strategy(strategy, hint="Pass the strategy to fix, or None for every strategy.")
    if isinstance(strategy.extended, _tf.MirroredExtended):
        return _tf.collective_keys(strategy.extended)
    if default is not _NO_KEYS:
        return default
    raise TypeError(
        f"multi_step_fix(strategy) fixes a MirroredStrategy-based strategy "
        f"(MirroredStrategy, MultiWorkerMirroredStrategy, the fake TPU); got "
        f"{type(strategy).__name__}, whose all-reduce is no collective of "
        f"{_KERAS_ISSUE}. Pass one of those, or None for every strategy."
    )


def multi_step_fix(strategy=None):
    """A `MultiStepFix`, not yet started: `with multi_step_fix(): model.fit(...)`.

    `strategy`: fix only that strategy's collectives (None: every strategy's).
    """
    return MultiStepFix(strategy)


def multi_step_fix_started(strategy=None):
    """Whether a `MultiStepFix` for every strategy is started in this process;
    with `strategy`, whether a started fix covers that strategy."""
    fixes = tuple(_started_fixes)
    if strategy is None:
        return any(fix._keys is None for fix in fixes)  # pylint: disable=protected-access
    return any(fix.covers(strategy) for fix in fixes)
