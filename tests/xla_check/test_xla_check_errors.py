"""A step that cannot compile fails with the TPU's error type: tf.errors.InvalidArgumentError."""

import inspect
import pickle
import warnings

import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute.testing import (
    FakeTPUClusterResolver,
    TPUCompatibilityError,
    TPUPerformanceWarning,
    check_tpu_compatible,
    ensure_tpu_compatible,
)

X = tf.constant([1.0, -2.0, 3.0, -4.0])


def as_string_step(x):
    return tf.reduce_sum(x) + tf.cast(tf.strings.length(tf.strings.as_string(x))[0], tf.float32)


def two_problem_step(x):
    return tf.reduce_sum(tf.cast(x, tf.float64)), tf.strings.as_string(x)


def good_step(x):
    return tf.distribute.get_replica_context().all_reduce("SUM", x * 2.0)


@pytest.fixture(scope="module", name="strict")
def strict_fixture():
    return compat_distribute.TPUStrategy(FakeTPUClusterResolver("v4-8", strict=True))


def test_strict_mode_failure_is_caught_as_the_tpus_invalid_argument_error(strict):
    @tf.function
    def bad(x):
        return strict.run(as_string_step, args=(x,))

    caught = None
    try:
        bad(X)
    except tf.errors.InvalidArgumentError as e:  # what a TPU raises
        caught = e
    assert isinstance(caught, TPUCompatibilityError)
    assert caught.error_code == tf.errors.INVALID_ARGUMENT
    assert caught.message == str(caught)
    headline = str(caught).splitlines()[0]
    assert headline == (
        "Detected unsupported operations when trying to compile graph as_string_step on XLA_TPU_JIT: AsString"
    )
    # The report is all there, and says what check_tpu_compatible says.
    assert [(p.kind, p.op_type) for p in caught.report.problems] == [("unsupported_op", "AsString")]
    assert "No registered 'AsString' OpKernel for XLA_CPU_JIT devices" in str(caught)
    checked = check_tpu_compatible(as_string_step, X, strategy=strict)
    assert [(p.kind, p.op_type, p.lineno) for p in checked.problems] == [
        (p.kind, p.op_type, p.lineno) for p in caught.report.problems
    ]

    # A good step still runs on the same strategy after a failed one.
    @tf.function
    def good(x):
        return strict.run(good_step, args=(x,))

    results = strict.experimental_local_results(good(tf.constant(1.0)))
    assert [float(r) for r in results] == [8.0] * 4


def test_every_failing_op_type_is_named_once_in_order():
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        ensure_tpu_compatible(two_problem_step, (X,))
    assert str(info.value).splitlines()[0] == (
        "Detected unsupported operations when trying to compile graph two_problem_step on XLA_TPU_JIT: "
        "Cast, AsString"
    )
    assert len(info.value.report.problems) == 2


def test_a_compile_failure_alone_is_named_by_its_op():
    def dynamic_fill_step(x):
        return tf.zeros(tf.cast(tf.reduce_sum(tf.abs(x)), tf.int32))

    with pytest.raises(TPUCompatibilityError) as info:
        ensure_tpu_compatible(dynamic_fill_step, (X,))
    assert str(info.value).splitlines()[0] == (
        "XLA cannot compile graph dynamic_fill_step on XLA_TPU_JIT at: Fill"
    )
    assert "must be a compile-time constant" in str(info.value)


def test_the_error_pickles_with_its_report():
    # Errors cross process boundaries (a cluster's worker sends its failure home).
    with pytest.raises(TPUCompatibilityError) as info:
        ensure_tpu_compatible(as_string_step, (X,))
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is TPUCompatibilityError
    assert copy.report == info.value.report
    assert str(copy) == str(info.value)


def test_the_error_class_is_loaded_on_first_use(run_python):
    result = run_python(
        """
        import sys
        import compat_distribute.testing as testing
        print("tensorflow" in sys.modules)
        error = testing.TPUCompatibilityError
        import tensorflow as tf
        print(issubclass(error, tf.errors.InvalidArgumentError), error.__module__)
        """,
        fresh=True,  # It asserts what a fresh interpreter has imported.
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["False", "True compat_distribute.testing.xla_check.errors"]


def test_hazards_warn_once_at_the_callers_line():
    def masked_step(x):
        return tf.reduce_sum(tf.boolean_mask(x, x > 0))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = ensure_tpu_compatible(masked_step, (X,))
        line = inspect.currentframe().f_lineno - 1
    assert report.ok
    assert [(w.category, w.filename, w.lineno) for w in caught] == [(TPUPerformanceWarning, __file__, line)]
    assert str(caught[0].message).startswith("masked_step: compiles for a TPU, but:\n  - ")
