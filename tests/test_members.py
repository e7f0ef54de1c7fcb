"""Every row of the V1 member table, checked on real TensorFlow.

Rows are checked on the MultiWorkerMirroredStrategy shim (one worker, in
process), which runs ops here; TPU rows are checked on the fake TPU in
test_fake_tpu.py, which is served from the same table.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import compat_distribute as cd
from compat_distribute import _members


@pytest.fixture(scope="module", name="strategy")
def strategy_fixture():
    return cd.MultiWorkerMirroredStrategy()


def assert_deprecated(get, message):
    """numpy's assert_deprecated: exactly one warning at the caller's line; an error under 'error'."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = get()
    assert [(w.category, str(w.message)) for w in caught] == [(DeprecationWarning, message)]
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(DeprecationWarning, match=message.split(";")[0]):
            get()
    return value


def assert_no_warning(get):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        return get()


def owner(strategy, row):
    return strategy if row.scope == _members.STRATEGY else strategy.extended


def rows_for(kind, backend=_members.MWMS):
    return [r for r in _members.TABLE if r.kind == kind and backend in r.backends]


def test_the_table_has_one_row_per_member_and_scope():
    keys = [(r.scope, r.name, b) for r in _members.TABLE for b in r.backends]
    assert len(keys) == len(set(keys))


def test_every_v1_member_of_tf_has_a_row():
    """The TF1 classes still shipped in TF 2.21 list no member the table misses."""
    v1 = {
        _members.TPU: tf.compat.v1.distribute.experimental.TPUStrategy,
        _members.MWMS: tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy,
    }
    for backend, cls in v1.items():
        public = {n for n in dir(cls) if not n.startswith("_")}
        named = {r.name for r in _members.rows(backend, _members.STRATEGY)}
        assert public - named == set(), backend


@pytest.mark.parametrize("row", rows_for(_members.RENAMED), ids=lambda r: f"{r.scope}.{r.name}")
def test_renamed_rows_warn_once_and_serve_the_new_member(strategy, row):
    served = assert_deprecated(lambda: getattr(owner(strategy, row), row.name), row.message)
    expected = strategy
    for part in row.new.split("."):
        expected = getattr(expected, part)
    assert served == expected
    assert f"use {row.new} (renamed in TensorFlow {row.version})" in row.message


@pytest.mark.parametrize("row", rows_for(_members.GONE), ids=lambda r: f"{r.scope}.{r.name}")
def test_gone_rows_raise_attribute_error_with_advice(strategy, row):
    with pytest.raises(AttributeError) as info:
        getattr(owner(strategy, row), row.name)
    assert str(info.value) == f"MultiWorkerMirroredStrategy.{row.message}"
    assert row.advice in str(info.value)
    assert not hasattr(owner(strategy, row), row.name)


@pytest.mark.parametrize(
    "row",
    [r for r in rows_for(_members.WORKS) if r.impl is None],
    ids=lambda r: f"{r.scope}.{r.name}",
)
def test_rows_tf2_still_serves_are_there_without_warning(strategy, row):
    assert_no_warning(lambda: getattr(owner(strategy, row), row.name))


def test_renamed_members_run(strategy):
    with pytest.warns(DeprecationWarning):
        result = strategy.experimental_run_v2(lambda x: x * 2, args=(tf.constant(3.0),))
    assert float(result) == 6.0
    with pytest.warns(DeprecationWarning):
        assert strategy.unwrap(tf.constant(1.0))[0].numpy() == 1.0
    dataset_fn = lambda ctx: tf.data.Dataset.range(4).batch(2)
    with pytest.warns(DeprecationWarning):
        dist = strategy.experimental_distribute_datasets_from_function(dataset_fn)
    assert [b.numpy().tolist() for b in dist] == [[0, 1], [2, 3]]


# One test per WORKS row with a V1 implementation; the next test checks none is missed.
WORKS_TESTS = {}


def works(name, scope=_members.STRATEGY):
    def register(fn):
        WORKS_TESTS[(scope, name)] = fn
        return fn

    return register


@works("reduce")
def check_reduce_without_axis(strategy):
    per_replica = strategy.run(lambda: tf.constant([1.0, 2.0]))
    assert strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica).numpy().tolist() == [1.0, 2.0]
    assert strategy.reduce("MEAN", per_replica, axis=0).numpy() == 1.5


@works("make_dataset_iterator")
def check_make_dataset_iterator(strategy):
    iterator = strategy.make_dataset_iterator(tf.data.Dataset.range(6).batch(3))
    iterator.initialize()
    assert iterator.get_next().numpy().tolist() == [0, 1, 2]
    assert iterator.get_next().numpy().tolist() == [3, 4, 5]


@works("experimental_run")
def check_experimental_run(strategy):
    iterator = strategy.make_dataset_iterator(tf.data.Dataset.range(4).batch(2))
    iterator.initialize()
    assert strategy.experimental_run(lambda x: x * 10, iterator).numpy().tolist() == [0, 10]
    assert float(strategy.experimental_run(lambda: tf.constant(7.0))) == 7.0


@works("make_input_fn_iterator")
def check_make_input_fn_iterator(strategy):
    seen = []

    def input_fn(ctx):
        seen.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        return tf.data.Dataset.range(10, 14).batch(2)

    iterator = strategy.make_input_fn_iterator(input_fn)
    iterator.initialize()
    assert iterator.get_next().numpy().tolist() == [10, 11]
    assert seen == [(1, 0, 1)]
    with pytest.raises(
        ValueError, match="replication_mode must be InputReplicationMode.PER_WORKER"
    ):
        strategy.make_input_fn_iterator(input_fn, replication_mode="PER_REPLICA")


@works("experimental_make_numpy_dataset")
def check_experimental_make_numpy_dataset(strategy):
    dataset = strategy.experimental_make_numpy_dataset(np.arange(6, dtype=np.float32))
    assert [float(x) for x in dataset] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


@works("configure")
def check_configure(strategy):
    config = tf.compat.v1.ConfigProto()
    strategy.configure(session_config=config)
    assert config == strategy.update_config_proto(tf.compat.v1.ConfigProto())


@works("initialize")
def check_initialize(strategy):
    assert strategy.initialize() == []


@works("finalize")
def check_finalize(strategy):
    assert strategy.finalize() == []


@works("reduce_to", _members.EXTENDED)
def check_reduce_to_with_hints(strategy):
    value = strategy.run(lambda: tf.constant(4.0))
    hints = tf.distribute.experimental.CollectiveHints(bytes_per_pack=1024)
    reduced = strategy.extended.reduce_to("SUM", value, "/cpu:0", experimental_hints=hints)
    assert float(reduced) == 4.0
    with pytest.raises(ValueError, match="Pass either options= or experimental_hints=, not both"):
        strategy.extended.reduce_to(
            "SUM",
            value,
            "/cpu:0",
            options=tf.distribute.experimental.CommunicationOptions(),
            experimental_hints=hints,
        )


@works("batch_reduce_to", _members.EXTENDED)
def check_batch_reduce_to_with_hints(strategy):
    value = strategy.run(lambda: tf.constant(5.0))
    hints = tf.distribute.experimental.CollectiveHints(timeout_seconds=30.0)
    reduced = strategy.extended.batch_reduce_to(
        "SUM", [(value, "/cpu:0")], experimental_hints=hints
    )
    assert [float(r) for r in reduced] == [5.0]


@works("experimental_run_steps_on_iterator", _members.EXTENDED)
def check_run_steps_on_iterator(strategy):
    with strategy.scope():
        counter = tf.Variable(0, dtype=tf.int64)
    iterator = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.range(100).batch(1)))

    def step_fn(ctx, inputs):
        def replica_step(x):
            counter.assign_add(1)
            return tf.reduce_sum(x)

        out = strategy.extended.call_for_each_replica(replica_step, args=(inputs,))
        ctx.set_last_step_output("last", out, reduce_op=tf.distribute.ReduceOp.SUM)
        ctx.set_non_tensor_output("label", "v1-loop")

    ctx = strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations=3)
    assert int(ctx.run_op) == 3
    assert int(ctx.last_step_outputs["last"]) == 2
    assert ctx.non_tensor_outputs == {"label": "v1-loop"}
    assert int(counter.numpy()) == 3
    ctx = strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations=2)
    assert int(ctx.last_step_outputs["last"]) == 4
    assert int(counter.numpy()) == 5
    with pytest.raises(
        ValueError, match=r"iterations must be a positive int \(>= 1\); got 0 \(int\)"
    ):
        strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations=0)


def test_every_v1_implementation_has_a_behaviour_test():
    implemented = {
        (r.scope, r.name)
        for r in _members.TABLE
        if r.kind == _members.WORKS and r.impl is not None and _members.MWMS in r.backends
    }
    assert implemented == set(WORKS_TESTS)


@pytest.mark.parametrize("key", sorted(WORKS_TESTS), ids=lambda k: f"{k[0]}.{k[1]}")
def test_v1_implementation_behaves_as_tf1(strategy, key):
    assert_no_warning(lambda: WORKS_TESTS[key](strategy))


def test_migration_table_lists_every_changed_row():
    table = _members.migration_table()
    for row in _members.TABLE:
        if row.kind != _members.WORKS or row.impl is not None:
            assert f".{row.name}` |" in table
    assert (
        "| `strategy.experimental_run_v2` | TPU and MultiWorkerMirrored | renamed in TF 2.2 (warns) | use `run` |"
        in table
    )


def test_readme_shows_this_table():
    import os

    readme = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
    with open(readme) as f:
        text = f.read()
    assert _members.migration_table() in text, "run `python tools/readme.py members`"
