"""`strategy.run` as on a TPU: outputs, arguments, loops, and steps a TPU cannot compile."""

import typing

import pytest
import tensorflow as tf

from conformance_support import by_design
from conformance_support import device_names_differ
from conformance_support import local
from conformance_support import strategy_on
from conformance_support import strict_mode_only


@device_names_differ
def test_each_replica_returns_its_own_output(tpu_strategy):
    """Squaring 2 in `run` gives 4.0 on every replica, each output on its replica's core.

    TF: tpu_strategy_test.py TPUStrategyTest.test_run_output_on_device
    """

    @tf.function
    def step(x):
        return tpu_strategy.run(tf.square, args=(x,))

    outputs = tpu_strategy.experimental_local_results(step(tf.constant(2.0)))
    assert len(outputs) == tpu_strategy.num_replicas_in_sync
    assert [o.numpy() for o in outputs] == [4.0] * tpu_strategy.num_replicas_in_sync
    assert [o.backing_device for o in outputs] == list(tpu_strategy.extended.worker_devices)


class Composite(tf.experimental.ExtensionType):
    """A user composite with nested components, as TF's test builds one."""

    first: tf.Tensor
    rest: typing.Tuple[tf.Tensor, tf.Tensor]


def test_a_composite_returned_unchanged_comes_back_once_per_replica(tpu_strategy):
    """A composite input returned unchanged comes back on every replica with its components, beside first + mean(rest) = 0.50000006.

    TF: tpu_strategy_test.py TPUStrategyTest.test_composite_input_with_non_flat_components
    """
    a, b, c = tf.constant([0.1]), tf.constant([1.2]), tf.constant([-0.4])

    @tf.function
    def step(composite):
        def replica(value):
            return value, value.first + (value.rest[0] + value.rest[1]) / 2

        outputs = tpu_strategy.run(replica, args=(composite,))
        return tf.nest.map_structure(tpu_strategy.experimental_local_results, outputs)

    composites, results = step(Composite(a, (b, c)))
    n = tpu_strategy.num_replicas_in_sync
    assert len(composites) == len(results) == n
    for composite, result in zip(composites, results):
        assert isinstance(composite, Composite)
        assert composite.first.numpy().tolist() == a.numpy().tolist()
        rest = [t.numpy().tolist() for t in composite.rest]
        assert rest == [b.numpy().tolist(), c.numpy().tolist()]
        assert result.numpy().tolist() == tf.constant([0.50000006]).numpy().tolist()


def test_nones_and_empty_containers_pass_through_run(tpu_strategy):
    """`run` of an identity step returns nested [1, [2, None]], [] and {} as given.

    TF: tpu_strategy_test.py TPUStrategyTest.test_run_passing_and_returning_nones
    TF: tpu_strategy_test.py TPUStrategyTest.test_run_passing_and_returning_empty_list
    TF: tpu_strategy_test.py TPUStrategyTest.test_run_passing_and_returning_empty_dict
    """

    @tf.function
    def step():
        return (
            tpu_strategy.run(lambda x: x, args=([1, [2, None]],)),
            tpu_strategy.run(lambda x: x, args=([],)),
            tpu_strategy.run(lambda x: x, args=({},)),
        )

    nested, empty_list, empty_dict = step()
    first = tpu_strategy.experimental_local_results(nested[0])[0]
    assert first.numpy() == 1
    assert tpu_strategy.experimental_local_results(nested[1][0])[0].numpy() == 2
    assert nested[1][1] is None
    assert empty_list == [] and empty_dict == {}


def test_run_state_carries_through_a_device_loop(tpu_strategy):
    """Per-replica zeros fed back into `run` (+1) ten times inside tf.range sum to replicas x 10.

    TF: tpu_strategy_test.py TPUStrategyTest.test_cluster_in_graph_and_while_body_fn
    """

    @tf.function
    def train():
        state = tpu_strategy.run(lambda: tf.zeros(()))
        for _ in tf.range(10):
            state = tpu_strategy.run(lambda s: s + 1.0, args=(state,))
        return tpu_strategy.reduce("SUM", state, axis=None)

    assert train().numpy() == tpu_strategy.num_replicas_in_sync * 10


def test_one_step_function_runs_twice_in_nested_functions(tpu_strategy):
    """One step function runs in two `run` calls of nested tf.functions without error.

    TF: tpu_strategy_test.py TPUStrategyTest.test_two_clusters_with_same_fn
    """

    @tf.function
    def inner(x):
        return tpu_strategy.run(lambda v: v + 1, args=(x,))

    @tf.function
    def outer(x):
        inner(x)
        return inner(x)

    assert local(tpu_strategy, outer(tf.constant(1))) == [2] * tpu_strategy.num_replicas_in_sync


def test_replica_ids_are_captured_in_a_retraced_function(tpu_strategy):
    """A tf.function step returning its replica id runs inside a function that traces twice.

    TF: strategy_common_test.py StrategyTest.testCaptureReplicaId
    """
    made = {}

    @tf.function
    def step():
        if "v" not in made:
            made["v"] = tf.Variable(0.0)
        return tpu_strategy.run(
            tf.function(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)
        )

    assert local(tpu_strategy, step()) == list(range(tpu_strategy.num_replicas_in_sync))


def test_run_checks_arguments_as_a_tpu(tpu_strategy):
    """`run` refuses variables in *args, mixed positional and *args, too many or doubled arguments.

    TF: tpu_strategy_test.py TPUStrategyTest.test_tpu_run_arg_parsing
    """
    with tpu_strategy.scope():
        variables = [tf.Variable(1)]

    def star_args(*args):
        del args

    def positional_and_star(first, *args):
        del first, args

    def two_named(first, second):
        del first, second

    def star_and_keyword_only(*args, kw):
        del args, kw

    def runs(fn, args=(), kwargs=None):
        tf.function(lambda: tpu_strategy.run(fn, args=args, kwargs=kwargs))()

    runs(star_args, args=(2,))
    runs(two_named, kwargs={"first": 2, "second": 3})
    runs(positional_and_star, args=(2, 3, 4))
    runs(star_and_keyword_only, args=(2, 3), kwargs={"kw": variables})
    with pytest.raises(TypeError, match="got multiple values for argument"):
        runs(two_named, args=(1,), kwargs={"first": 2, "second": 3})
    with pytest.raises(ValueError, match=r"cannot handle Variables passed to \*args"):
        runs(star_args, args=(2, variables))
    with pytest.raises(ValueError, match=r"mix of positional args and \*args"):
        runs(positional_and_star, args=(variables, 3, 4))
    with pytest.raises(ValueError, match="Too many positional arguments"):
        runs(two_named, args=(2, 3, 4))


@by_design(
    "the fake's variables are MirroredVariable subclasses with the TPU's read rules: TensorFlow "
    "and Keras emit TPU-only ops for the TPU variable classes, which cannot run on a CPU"
)
def test_variables_are_tpu_variable_classes(tpu_strategy, on_fake):
    """Variables made under the strategy are TPU variable classes.

    TF: tpu_strategy_test.py TPUStrategyTest.test_tpu_variable_run_argument
    """
    with tpu_strategy.scope():
        variable = tf.Variable(1)
    names = [cls.__name__ for cls in type(variable).__mro__]
    if on_fake:
        assert names[:1] == ["FakeTPUMirroredVariable"] and "MirroredVariable" in names
    else:
        assert "TPUVariableMixin" in names


def test_a_variable_passed_to_run_stays_a_variable(tpu_strategy):
    """A distributed variable passed in `args` reaches the step as a variable, not a tensor.

    TF: tpu_strategy_test.py TPUStrategyTest.test_tpu_variable_run_argument
    """
    with tpu_strategy.scope():
        variable = tf.Variable(1)
    seen = []

    def step(first, var):
        del first
        seen.append(isinstance(var, tf.Variable))

    tf.function(lambda: tpu_strategy.run(step, args=(2, variable)))()
    assert seen and all(seen)


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
def test_sequential_strategies_feed_each_other(tpu_resolver, topology):
    """Squares of [2, 2] on a two-core strategy, squared again on a one-core strategy, give [[16, 16]].

    TF: tpu_strategy_test.py TPUStrategyTest.test_sequential_runs
    """
    both = strategy_on(tpu_resolver, topology, [0, 1])
    first = strategy_on(tpu_resolver, topology, [0])

    @tf.function
    def train():
        squares = both.experimental_local_results(both.run(tf.square, args=([2.0, 2.0],)))
        return first.run(tf.square, args=([squares[0]],))

    assert [t.numpy().tolist() for t in train()] == [[16.0, 16.0]]


@strict_mode_only
def test_a_step_a_tpu_cannot_compile_fails_and_the_next_good_step_runs(tpu_resolver, on_fake):
    """A step with an op XLA cannot compile raises an OpError (InvalidArgumentError); a good step runs after.

    The fake checks in strict mode (`strict=True`, `--fake-tpu-strict`), which this test turns on.

    TF: tpu_strategy_test.py TPUStrategyTest.test_recover_from_compilation_failures
    """
    if on_fake:
        resolver = tpu_resolver.replace(strict=True)
    else:
        resolver = tpu_resolver
    strategy = tf.distribute.TPUStrategy(resolver)
    soft_placement = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)  # No automatic outside compilation, as TF's test.

    @tf.function
    def bad_step():
        return strategy.run(lambda: tf.strings.as_string(tf.constant(1.0)))

    @tf.function
    def good_step():
        return strategy.run(lambda: tf.random.normal([10]))

    try:
        for _ in range(2):  # A failed step fails again: nothing is cached as compiled.
            with pytest.raises(tf.errors.InvalidArgumentError, match="AsString"):
                bad_step()
        outputs = strategy.experimental_local_results(good_step())
    finally:
        tf.config.set_soft_device_placement(soft_placement)
    assert len(outputs) == strategy.num_replicas_in_sync
