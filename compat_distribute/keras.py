"""Keras 3 under the shims: TF1's `steps_per_run` as Keras' `steps_per_execution`.

TF1 code set the number of steps per device loop on the strategy
(`TPUStrategy(resolver, steps_per_run=N)`); Keras 3 sets it on the model
(`model.compile(..., steps_per_execution=N)`). `steps_per_execution(strategy)`
maps one to the other, and `keras_compile_kwargs(strategy)` gives the keyword
arguments for `compile`:

    with strategy.scope():
        model = make_model()
        model.compile(optimizer="sgd", loss="mse", **keras_compile_kwargs(strategy))

Known limit (Keras 3.15, keras-team/keras#19246): `steps_per_execution > 1`
fails inside `fit` with "You must feed a value for placeholder tensor ..."
when a MirroredStrategy-based strategy (MirroredStrategy,
MultiWorkerMirroredStrategy, the fake TPU) has two or more replicas, in one
process or across workers. The helper detects that case, warns and uses 1: the trained weights
are the same, only more host round trips are made. Pass
`on_unsupported="raise"` to get an error instead.

Keras is imported by none of this; only `compile` needs it.
"""

import warnings

KERAS_ISSUE = "keras-team/keras#19246"
ON_UNSUPPORTED = ("warn", "raise")


class KerasStepsWarning(UserWarning):
    """steps_per_run could not become steps_per_execution; 1 is used."""


def _hits_keras_multi_step_bug(strategy):
    from compat_distribute import _tf

    # CollectiveAllReduceExtended (multi-worker) and the fake TPU's extended
    # are MirroredExtended too. Keras' multi-step loop breaks with 2+ replicas,
    # also with one replica in each of two workers.
    return (
        isinstance(strategy.extended, _tf.MirroredExtended)
        and strategy.num_replicas_in_sync > 1
    )


def steps_per_execution(strategy, *, on_unsupported="warn"):
    """Keras' `steps_per_execution` for `strategy`: its `steps_per_run` (1 if it has none).

    Where Keras cannot run several steps per execution on `strategy` (see the
    module docstring), warns with `KerasStepsWarning` and returns 1, or raises
    `ValueError` when `on_unsupported="raise"`.
    """
    return _steps_per_execution(strategy, on_unsupported, stacklevel=3)


def _steps_per_execution(strategy, on_unsupported, stacklevel):
    if on_unsupported not in ON_UNSUPPORTED:
        raise ValueError(f"on_unsupported must be one of {ON_UNSUPPORTED}; got {on_unsupported!r}.")
    steps = getattr(strategy.extended, "steps_per_run", None) or 1
    if steps == 1 or not _hits_keras_multi_step_bug(strategy):
        return steps
    message = (
        f"steps_per_run={steps} cannot become Keras' steps_per_execution on "
        f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replicas: "
        f"Keras 3 fails in fit() with 'You must feed a value for placeholder "
        f"tensor' when steps_per_execution > 1 on a MirroredStrategy-based strategy "
        f"with 2 or more replicas ({KERAS_ISSUE})."
    )
    if on_unsupported == "raise":
        raise ValueError(
            message + " Compile with steps_per_execution=1, or build the strategy with "
            "steps_per_run=1."
        )
    warnings.warn(
        message + " Using steps_per_execution=1: the same training, one step per call.",
        KerasStepsWarning,
        stacklevel=stacklevel,  # the caller's line
    )
    return 1


def keras_compile_kwargs(strategy, *, on_unsupported="warn"):
    """`{"steps_per_execution": steps_per_execution(strategy)}`, for `model.compile`."""
    return {"steps_per_execution": _steps_per_execution(strategy, on_unsupported, stacklevel=3)}
