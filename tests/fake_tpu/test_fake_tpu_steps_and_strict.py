"""run_steps and the V1 signature on the fake TPU; strict mode."""


import logging

import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import FakeTPUStrategy
from compat_distribute.testing import fake_tpu
from compat_distribute.testing import initialize_tpu_system
from compat_distribute.testing import shutdown_tpu_system

from fake_tpu_helpers import values


def make_counter(strategy):
    with strategy.scope():
        return tf.Variable(0, dtype=tf.int64, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


def test_run_steps_runs_steps_per_run_steps_on_the_device(v1_steps):
    counter = make_counter(v1_steps)
    dataset = tf.data.Dataset.range(1000).batch(8, drop_remainder=True)
    iterator = iter(v1_steps.experimental_distribute_dataset(dataset))

    def step(x):
        counter.assign_add(1)
        return tf.distribute.get_replica_context().all_reduce("SUM", x)

    out = v1_steps.run_steps(step, iterator)  # steps_per_run = 4 steps: batches 0..3
    assert counter.numpy() == 4
    assert values(out, v1_steps) == [[sum(range(24, 32))]] * 8
    out = v1_steps.run_steps(step, iterator, steps=2)  # batches 4, 5
    assert counter.numpy() == 6
    assert values(out, v1_steps) == [[sum(range(40, 48))]] * 8
    # Exactly 6 batches were consumed.
    assert values(next(iterator), v1_steps) == [[48 + i] for i in range(8)]
    with pytest.raises(ValueError, match=r"steps must be a positive int \(>= 1\); got 0 \(int\)"):
        v1_steps.run_steps(step, iterator, steps=0)


@pytest.mark.parametrize("name", ["steps", "iterations"])
def test_a_step_count_past_int32_is_refused_before_any_step(v1_steps, name):
    counter = make_counter(v1_steps)
    dataset = tf.data.Dataset.range(1000).batch(8, drop_remainder=True)

    def step(x):
        counter.assign_add(1)
        return x

    if name == "steps":
        call = lambda count: v1_steps.run_steps(
            step, iter(v1_steps.experimental_distribute_dataset(dataset)), steps=count
        )
    else:
        iterator = v1_steps.make_dataset_iterator(dataset)
        call = lambda count: v1_steps.extended.experimental_run_steps_on_iterator(
            lambda ctx, x: v1_steps.extended.call_for_each_replica(step, args=(x,)),
            iterator,
            iterations=count,
        )
    for count in (2**31, 2**64):  # 2**64 used to fail inside TF's constant_op
        with pytest.raises(ValueError) as info:
            call(count)
        assert str(info.value) == (
            f"{name} must be at most 2147483647 (TF1 counted the steps of an on-device "
            f"loop in an int32); got {count}. Pass {name}=None to run steps_per_run "
            f"steps, or a count >= 1."
        )
    assert counter.numpy() == 0


def test_run_steps_on_iterator_runs_iterations_on_the_device(v1_steps):
    counter = make_counter(v1_steps)
    iterator = v1_steps.make_dataset_iterator(
        tf.data.Dataset.range(1000).batch(8, drop_remainder=True)
    )

    def replica_fn(x):
        counter.assign_add(1)
        return x

    def step(ctx, inputs):
        out = v1_steps.extended.call_for_each_replica(replica_fn, args=(inputs,))
        ctx.set_last_step_output("x", out)
        return out

    ctx = v1_steps.extended.experimental_run_steps_on_iterator(step, iterator, iterations=3)
    assert counter.numpy() == 3
    assert int(ctx.run_op) == 3
    assert values(ctx.last_step_outputs["x"], v1_steps) == [[16 + i] for i in range(8)]
    with pytest.raises(
        ValueError, match=r"iterations must be a positive int \(>= 1\); got 0 \(int\)"
    ):
        v1_steps.extended.experimental_run_steps_on_iterator(step, iterator, iterations=0)


# The V1 signature and member table.


def test_v1_tpu_strategy_builds_the_fake(v1_steps):
    assert isinstance(v1_steps, FakeTPUStrategy)
    assert v1_steps.steps_per_run == v1_steps.extended.steps_per_run == 4
    with pytest.warns(DeprecationWarning, match="experimental_run_v2 is deprecated; use run"):
        assert v1_steps.experimental_run_v2 == v1_steps.run
    assert not hasattr(v1_steps, "experimental_make_numpy_iterator")
    assert v1_steps.initialize() == [] and v1_steps.finalize() == []


def test_v1_tpu_strategy_with_device_assignment():
    resolver = FakeTPUClusterResolver("v3-8")
    assignment = tf.tpu.experimental.DeviceAssignment.build(
        initialize_tpu_system(resolver), computation_shape=[1, 1, 1, 2], num_replicas=4
    )
    strategy = compat_distribute.TPUStrategy(
        resolver, steps_per_run=2, device_assignment=assignment
    )
    assert strategy.cluster_resolver is resolver
    assert strategy.num_replicas_in_sync == 4
    assert strategy.extended.steps_per_run == 2
    with pytest.raises(ValueError, match=r"steps_per_run must be a positive int \(>= 1\); got 0"):
        compat_distribute.TPUStrategy(resolver, steps_per_run=0)


# Strict mode: the XLA compile check runs the first time each step is traced.


def _bad_replica_fn(x):
    as_text = tf.strings.as_string(x)  # no XLA kernel
    doubled = tf.cast(x, tf.float64) * 2.0  # float64: no TPU support
    return tf.cast(doubled, tf.float32) + tf.cast(tf.strings.length(as_text), tf.float32)


def _clean_replica_fn(x, w):
    loss = tf.reduce_sum(x * w)
    total = tf.distribute.get_replica_context().all_reduce("SUM", loss)
    w.assign_sub(0.1 * total)
    return total


def _train(strategy):
    with strategy.scope():
        w = tf.Variable(1.0)
    dataset = tf.data.Dataset.range(32).map(lambda i: tf.cast(i, tf.float32)).batch(8)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    totals = strategy.run_steps(lambda x: _clean_replica_fn(x, w), iterator, steps=3)
    return [float(t) for t in strategy.experimental_local_results(totals)], float(w.numpy())


def test_strict_mode_refuses_a_bad_step_listing_every_problem():
    from compat_distribute.testing import TPUCompatibilityError

    strict = FakeTPUStrategy(FakeTPUClusterResolver("v4-8", strict=True))

    @tf.function
    def step(x):
        return strict.run(_bad_replica_fn, args=(x,))

    with pytest.raises(TPUCompatibilityError) as info:
        step(tf.constant(1.0))
    message = str(info.value)
    # One entry per offending line, though each op exists once per replica.
    assert "_bad_replica_fn: 2 TPU problem(s)" in message
    assert "XLA has no kernel for AsString" in message
    assert "No registered 'AsString' OpKernel for XLA_CPU_JIT devices" in message  # TF's own text
    assert "produces float64, which the TPU does not support" in message
    source_lines = {(p.filename, p.lineno) for p in info.value.report.problems}
    first = _bad_replica_fn.__code__.co_firstlineno
    assert source_lines == {(__file__, first + 1), (__file__, first + 2)}
    lenient = FakeTPUStrategy(FakeTPUClusterResolver("v4-8", strict=False))

    @tf.function
    def lenient_step(x):
        return lenient.run(_bad_replica_fn, args=(x,))

    # 2 * 1.0 + len("1.000000"): the lenient fake runs what a TPU would refuse.
    assert [float(v) for v in lenient.experimental_local_results(lenient_step(1.0))] == [10.0] * 4


def test_strict_mode_is_off_by_default():
    assert FakeTPUClusterResolver().strict is False
    assert fake_tpu().resolver().strict is False
    assert FakeTPUClusterResolver(strict=True).strict is True


def test_strict_mode_runs_a_clean_step_as_non_strict_mode_does():
    strict = compat_distribute.TPUStrategy(FakeTPUClusterResolver("v4-8", strict=True))
    lenient = compat_distribute.TPUStrategy(FakeTPUClusterResolver("v4-8"))
    trained = _train(strict)
    assert trained == _train(lenient)
    totals, w = trained
    # Per step: total = sum(batch) * w on every replica, then w -= 0.1 * total.
    # Batches sum to 28, 92, 156: w = 1 -> -1.8 -> 14.76 -> -215.496.
    assert totals == [pytest.approx(156 * 14.76)] * 4
    assert w == pytest.approx(-215.496)


# fake_tpu(): unmodified TPU code.



def test_strict_mode_passes_a_step_that_all_reduces_a_shared_tensor():
    """On a TPU every tensor in the step is a cross_replica_sum operand, shared ones too."""
    strategy = FakeTPUStrategy(FakeTPUClusterResolver("v4-8", strict=True))
    captured = tf.constant(3.0)

    @tf.function
    def step(x):
        def replica(y):
            context = tf.distribute.get_replica_context()
            return context.all_reduce("SUM", y) + context.all_reduce("SUM", captured)

        return strategy.run(replica, args=(x,))

    assert values(step(tf.constant(1.0)), strategy) == [16.0] * 4


def test_initializing_twice_warns_until_shut_down(caplog):
    resolver = FakeTPUClusterResolver("v4-8")
    shutdown_tpu_system(resolver)

    def warnings_of_initialize():
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tensorflow"):
            initialize_tpu_system(resolver)
        return [r.getMessage() for r in caplog.records]

    assert warnings_of_initialize() == []
    assert warnings_of_initialize() == [
        "TPU system fake-v4-8 has already been initialized. Reinitializing the TPU can cause "
        "previously created variables on TPU to be lost."
    ]
    shutdown_tpu_system(resolver)
    assert warnings_of_initialize() == []


def test_reduce_without_a_reduce_op_says_what_is_accepted(v3_8):
    value = v3_8.experimental_distribute_values_from_function(lambda _: tf.ones(()))
    for call in (
        lambda: v3_8.reduce(None, value, axis=None),
        lambda: v3_8.extended.reduce_to(None, value, "/cpu:0"),
        lambda: v3_8.extended.batch_reduce_to(None, [(value, "/cpu:0")]),
    ):
        with pytest.raises(AssertionError) as info:
            call()
        assert str(info.value) == (
            "reduce_op must be tf.distribute.ReduceOp.SUM or MEAN (or 'SUM' / 'MEAN'); got None. "
            "TensorFlow's reduce_to asserts the same (with no message)."
        )


def _bad_v1_calls(strategy, dataset):
    step = tf.function(lambda x: x)
    ctx_step = lambda ctx, x: x  # noqa: E731
    return {
        "run_steps(fn=None)": (
            lambda: strategy.run_steps(None, iter(dataset)),
            "fn must be callable; got None (NoneType).",
        ),
        "run_steps(dataset)": (
            lambda: strategy.run_steps(step, dataset),
            f"iterator must be an iterator with __next__(); got {dataset!r} "
            f"({type(dataset).__name__}) (a dataset, not an iterator over it). "
            f"Pass iter(strategy.experimental_distribute_dataset(dataset)).",
        ),
        "run_steps(list)": (
            lambda: strategy.run_steps(step, [1, 2]),
            "iterator must be an iterator with __next__(); got [1, 2] (list). "
            "Pass iter(strategy.experimental_distribute_dataset(dataset)).",
        ),
        "experimental_run_steps_on_iterator(fn=None)": (
            lambda: strategy.extended.experimental_run_steps_on_iterator(
                None, strategy.make_dataset_iterator(dataset)
            ),
            "fn must be callable; got None (NoneType). Pass fn(ctx, inputs), called once "
            "a step.",
        ),
        "experimental_run_steps_on_iterator(iterator=None)": (
            lambda: strategy.extended.experimental_run_steps_on_iterator(ctx_step, None),
            "iterator must be an iterator with get_next(); got None (NoneType). Pass "
            "strategy.make_dataset_iterator(dataset).",
        ),
        "make_dataset_iterator(None)": (
            lambda: strategy.make_dataset_iterator(None),
            "dataset must be a tf.data.Dataset; got None (NoneType). Build one with "
            "tf.data.Dataset.from_tensor_slices(...).batch(global_batch_size).",
        ),
        "make_dataset_iterator(list)": (
            lambda: strategy.make_dataset_iterator([1, 2, 3]),
            "dataset must be a tf.data.Dataset; got [1, 2, 3] (list). Build one with "
            "tf.data.Dataset.from_tensor_slices(...).batch(global_batch_size).",
        ),
        "make_input_fn_iterator(None)": (
            lambda: strategy.make_input_fn_iterator(None),
            "input_fn must be callable; got None (NoneType). Pass input_fn(input_context) "
            "returning a tf.data.Dataset.",
        ),
        "configure(str)": (
            lambda: strategy.configure(session_config="x"),
            "session_config must be None or a tf.compat.v1.ConfigProto; got 'x' (str). "
            "Pass the ConfigProto your Session is built with; configure() updates it in "
            "place.",
        ),
    }


@pytest.mark.parametrize("call", list(_bad_v1_calls(None, None)))
def test_v1_members_refuse_bad_arguments_naming_them(v1_steps, call):
    # These failed inside TensorFlow (AttributeError, "'NoneType' object is not
    # an iterator" from AutoGraph) or, for a dataset in place of an iterator,
    # inside the traced loop.
    dataset = tf.data.Dataset.range(64).batch(8)
    fn, text = _bad_v1_calls(v1_steps, dataset)[call]
    with pytest.raises(TypeError) as info:
        fn()
    assert str(info.value) == text
