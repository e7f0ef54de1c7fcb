"""Every row of the V1 member table, checked against behaviour in both modes, on both shims.

A row's claim is checked in eager mode here and in TF1 graph mode
(`tf.compat.v1.disable_v2_behavior()` and a `Session`) in a subprocess, since
that switch is process-wide: on the MultiWorkerMirroredStrategy shim (one
worker, one replica) and on the TPU shim over a fake v4-8 (4 replicas). Each
member with a V1 implementation has a behaviour check that fails if the member
does nothing (a loop that runs no step, a value that is not computed).
"""

import json
import traceback
import warnings

import numpy as np
import pytest
import tensorflow as tf

import compat_distribute as cd
from compat_distribute import _members

SHIMS = (_members.MWMS, _members.TPU)
MODES = ("eager", "graph")


def make_strategy(shim):
    if shim == _members.MWMS:
        return cd.MultiWorkerMirroredStrategy()
    from compat_distribute.testing import FakeTPUClusterResolver

    return cd.TPUStrategy(FakeTPUClusterResolver("v4-8"), steps_per_run=3)


class Eager:
    """Runs checks eagerly; a step runs inside a `tf.function`, as TF2 code does."""

    mode = "eager"
    session = None

    def value(self, x):
        return tf.nest.map_structure(lambda t: np.asarray(t).tolist(), x)

    def run(self, strategy, fn, args=()):
        return tf.function(lambda: strategy.run(fn, args=args))()

    def initialize(self, iterator):
        iterator.initialize()

    def init_variables(self):
        pass

    def assign(self, variable, value):
        variable.assign(value)


class Graph(Eager):
    """Runs checks in a TF1 graph: values are fetched with `Session.run`."""

    mode = "graph"

    def __init__(self):
        self.session = tf.compat.v1.Session()

    def value(self, x):
        return tf.nest.map_structure(lambda t: np.asarray(t).tolist(), self.session.run(x))

    def run(self, strategy, fn, args=()):
        return strategy.run(fn, args=args)

    def initialize(self, iterator):
        self.session.run(iterator.initialize())

    def init_variables(self):
        self.session.run(tf.compat.v1.global_variables_initializer())

    def assign(self, variable, value):
        self.session.run(variable.assign(value))


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


def row_id(row, shim):
    return f"{shim}:{row.scope}.{row.name}"


def local(strategy, value, r):
    """The replicas' values of `value`, in replica order, from one fetch."""
    return r.value(list(strategy.experimental_local_results(value)))


def replicas(strategy):
    return strategy.num_replicas_in_sync


# One behaviour check per WORKS row with a V1 implementation, keyed by (scope,
# name); `test_every_v1_implementation_has_a_behaviour_check` checks none is missed.
CHECKS = {}


def check(name, scope=_members.STRATEGY, shims=SHIMS):
    def register(fn):
        for shim in shims:
            CHECKS[(scope, name, shim)] = fn
        return fn

    return register


@check("reduce")
def check_reduce_without_axis(strategy, r):
    n = replicas(strategy)
    per_replica = r.run(strategy, lambda: tf.constant([1.0, 2.0]))
    assert r.value(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica)) == [n, 2.0 * n]
    assert r.value(strategy.reduce("MEAN", per_replica, axis=0)) == 1.5


def _iterator(strategy, r, dataset):
    iterator = strategy.make_dataset_iterator(dataset)
    r.initialize(iterator)
    return iterator


@check("experimental_run", shims=(_members.MWMS,))
def check_experimental_run(strategy, r):
    n = replicas(strategy)
    iterator = _iterator(strategy, r, tf.data.Dataset.range(4 * n).batch(n))
    assert local(strategy, strategy.experimental_run(lambda x: x * 10, iterator), r) == [
        [10 * i] for i in range(n)
    ]
    assert r.value(strategy.experimental_run(lambda: tf.constant(7.0))) == 7.0


@check("experimental_run", shims=(_members.TPU,))
def check_experimental_run_on_tpu(strategy, r):
    n = replicas(strategy)
    iterator = _iterator(strategy, r, tf.data.Dataset.range(4 * n).batch(n))
    if r.mode == "eager":
        with pytest.raises(NotImplementedError) as info:
            strategy.experimental_run(lambda x: x * 10, iterator)
        assert str(info.value).startswith(
            "Eager mode not supported in TPUStrategy outside TF functions."
        )
        assert "@tf.function" in str(info.value)
        # A tf.function runs eagerly, as TF2's run takes it on a TPU.
        eager = strategy.experimental_run(tf.function(lambda x: x * 100), iterator)
        assert local(strategy, eager, r) == [[100 * i] for i in range(n)]
        result = tf.function(lambda: strategy.experimental_run(lambda x: x * 10, iterator))()
        assert local(strategy, result, r) == [[10 * (n + i)] for i in range(n)]
        return
    else:
        result = strategy.experimental_run(lambda x: x * 10, iterator)
    assert local(strategy, result, r) == [[10 * i] for i in range(n)]


@check("make_dataset_iterator")
def check_make_dataset_iterator(strategy, r):
    n = replicas(strategy)
    iterator = _iterator(strategy, r, tf.data.Dataset.range(6 * n).batch(3 * n))
    first = local(strategy, iterator.get_next(), r)
    second = local(strategy, iterator.get_next(), r)
    assert sum(first, []) == list(range(3 * n))
    assert sum(second, []) == list(range(3 * n, 6 * n))


@check("make_input_fn_iterator")
def check_make_input_fn_iterator(strategy, r):
    n = replicas(strategy)
    seen = []

    def input_fn(ctx):
        seen.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        return tf.data.Dataset.range(10, 10 + 4 * n).batch(1)  # per-replica batches

    iterator = strategy.make_input_fn_iterator(input_fn)
    r.initialize(iterator)
    assert sum(local(strategy, iterator.get_next(), r), []) == list(range(10, 10 + n))
    assert seen == [(1, 0, n)]
    with pytest.raises(
        ValueError, match="replication_mode must be InputReplicationMode.PER_WORKER"
    ):
        strategy.make_input_fn_iterator(input_fn, replication_mode="PER_REPLICA")


@check("experimental_make_numpy_dataset")
def check_experimental_make_numpy_dataset(strategy, r):
    dataset = strategy.experimental_make_numpy_dataset(
        np.arange(6, dtype=np.float32), session=r.session
    )
    if r.mode == "eager":
        assert [float(x) for x in dataset] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    else:
        iterator = tf.compat.v1.data.make_initializable_iterator(dataset.batch(6))
        r.session.run(iterator.initializer)
        assert r.value(iterator.get_next()) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    accepted = (
        "numpy_input must be a NumPy array or a nest (tuple, list, dict) of NumPy arrays "
        "of one first dimension (the examples); "
    )
    with pytest.raises(TypeError) as refused:
        strategy.experimental_make_numpy_dataset(None, session=r.session)
    assert str(refused.value) == (
        accepted + "got None (NoneType). Pass np.asarray(...) of at least one dimension, "
        "or build the dataset with tf.data.Dataset.from_tensor_slices(...)."
    )
    with pytest.raises(ValueError) as refused:
        strategy.experimental_make_numpy_dataset(
            {"x": np.zeros(2), "y": np.zeros(3)}, session=r.session
        )
    assert str(refused.value) == (
        accepted + "the arrays of tf.nest.flatten(numpy_input) have [2, 3] examples. "
        "Give every array the same first dimension."
    )


@check("configure")
def check_configure(strategy, r):
    del r
    config = tf.compat.v1.ConfigProto()
    strategy.configure(session_config=config)
    assert config == strategy.update_config_proto(tf.compat.v1.ConfigProto())


@check("initialize")
def check_initialize(strategy, r):
    assert strategy.initialize() == []
    assert r.value(strategy.initialize()) == []


@check("finalize")
def check_finalize(strategy, r):
    assert strategy.finalize() == []
    assert r.value(strategy.finalize()) == []


@check("steps_per_run", shims=(_members.TPU,))
def check_steps_per_run(strategy, r):
    del r
    assert strategy.steps_per_run == strategy.extended.steps_per_run == 3


@check("reduce_to", _members.EXTENDED)
def check_reduce_to_with_hints(strategy, r):
    n = replicas(strategy)
    value = r.run(strategy, lambda: tf.constant(4.0))
    hints = tf.distribute.experimental.CollectiveHints(bytes_per_pack=1024)
    reduced = strategy.extended.reduce_to("SUM", value, "/cpu:0", experimental_hints=hints)
    assert set(local(strategy, reduced, r)) == {4.0 * n}
    with pytest.raises(ValueError, match="Pass either options= or experimental_hints=, not both"):
        strategy.extended.reduce_to(
            "SUM",
            value,
            "/cpu:0",
            options=tf.distribute.experimental.CommunicationOptions(),
            experimental_hints=hints,
        )


@check("batch_reduce_to", _members.EXTENDED)
def check_batch_reduce_to_with_hints(strategy, r):
    n = replicas(strategy)
    value = r.run(strategy, lambda: tf.constant(5.0))
    hints = tf.distribute.experimental.CollectiveHints(timeout_seconds=30.0)
    reduced = strategy.extended.batch_reduce_to(
        "SUM", [(value, "/cpu:0")], experimental_hints=hints
    )
    assert len(reduced) == 1
    # One value, or a copy on each device of the destination.
    assert set(local(strategy, reduced[0], r)) == {5.0 * n}


@check("experimental_run_steps_on_iterator", _members.EXTENDED)
def check_run_steps_on_iterator(strategy, r):
    n = replicas(strategy)
    with strategy.scope():
        counter = tf.Variable(
            0, dtype=tf.int64, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA
        )
        iterations = tf.Variable(2, dtype=tf.int64)  # TF 1.14 Keras' K.variable(steps)
    r.init_variables()
    iterator = _iterator(strategy, r, tf.data.Dataset.range(1000).batch(n))

    def step_fn(ctx, inputs):
        def replica_step(x):
            # TF1 style: in a graph, an op runs when something depends on it.
            with tf.control_dependencies([counter.assign_add(1)]):
                return tf.reduce_sum(x)

        out = strategy.extended.call_for_each_replica(replica_step, args=(inputs,))
        ctx.set_last_step_output("last", out, reduce_op=tf.distribute.ReduceOp.SUM)
        ctx.set_non_tensor_output("label", "v1-loop")

    def batch_sum(step):  # the sum of the global batch of the step-th batch (from 1)
        return sum(range((step - 1) * n, step * n))

    # The loop carries the last step's outputs: as in TF1, their initial values.
    initial = {"last": tf.zeros([], tf.int64)}
    if r.mode == "graph":
        with pytest.raises((TypeError, ValueError)) as refused:
            strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations=3)
        hint = (
            "The steps set the outputs ['last']: initial_loop_values needs one initial value "
            "per {}, in name order; it holds 0. Pass, as TF1 required, "
            "initial_loop_values={{'last': tf.zeros([], tf.int64)}}."
        )
        if getattr(strategy.extended, "steps_per_run", None):  # TPUExtended's words
            assert type(refused.value) is TypeError and str(refused.value) == (
                f"Mismatch between input types and output types for training loop body: [] vs "
                f"[{', '.join(['tf.int64'] * n)}]. " + hint.format("output (in a dict, one value or one per replica)")
            )
        else:
            assert type(refused.value) is ValueError and str(refused.value) == (
                "experimental_run_steps_on_iterator: the loop starts with 0 value(s) of "
                "initial_loop_values, [], but each step gives 1, [tf.int64]. "
                + hint.format("local result of each output (one for a reduced output)")
            )
    ctx = strategy.extended.experimental_run_steps_on_iterator(
        step_fn, iterator, iterations=3, initial_loop_values=initial
    )
    assert ctx.non_tensor_outputs == {"label": "v1-loop"}
    assert r.value(ctx.run_op) == 3  # fetching run_op alone runs the steps
    assert r.value(counter) == 3
    if r.mode == "graph":
        # Fetched together, the outputs are the last step's of one run.
        steps, outputs = r.value([ctx.run_op, ctx.last_step_outputs])
        assert (steps, outputs, r.value(counter)) == (3, {"last": batch_sum(6)}, 6)
        done = 6
    else:
        assert r.value(ctx.last_step_outputs) == {"last": batch_sum(3)}
        done = 3
    # iterations as a variable, read at each call.
    ctx = strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations, initial)
    assert r.value(ctx.run_op) == 2 and r.value(counter) == done + 2
    r.assign(iterations, 4)
    if r.mode == "eager":  # read when called
        ctx = strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations, initial)
    assert r.value(ctx.run_op) == 4 and r.value(counter) == done + 6
    with pytest.raises(
        ValueError, match=r"iterations must be a positive int \(>= 1\); got 0 \(int\)"
    ):
        strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations=0)
    with pytest.raises(TypeError, match="iterations must be a positive int or a scalar integer"):
        strategy.extended.experimental_run_steps_on_iterator(
            step_fn, iterator, tf.constant([1, 2])
        )
    r.assign(iterations, 0)
    if r.mode == "eager":
        with pytest.raises(
            ValueError, match=r"iterations must be a positive int \(>= 1\); got 0 \(read from"
        ):
            strategy.extended.experimental_run_steps_on_iterator(step_fn, iterator, iterations)
    else:
        with pytest.raises(tf.errors.InvalidArgumentError, match="iterations must be a positive"):
            r.value(ctx.run_op)
    assert r.value(counter) == done + 6  # a refused count runs nothing


# The claims of the other kinds, the same for every row of the kind.


def check_renamed(strategy, row, r):
    served = assert_deprecated(lambda: getattr(owner(strategy, row), row.name), row.message)
    expected = strategy
    for part in row.new.split("."):
        expected = getattr(expected, part)
    assert served == expected
    assert f"use {row.new} (renamed in TensorFlow {row.version})" in row.message
    if row.name == "experimental_run_v2":  # the call TF 2.0-2.1 code makes
        if r.mode == "graph":
            result = served(lambda: tf.constant(3.0))
        else:
            result = tf.function(lambda: served(lambda: tf.constant(3.0)))()
        assert r.value(strategy.reduce("SUM", result)) == 3.0 * replicas(strategy)


def check_gone(strategy, row, r):
    del r
    with pytest.raises(AttributeError) as info:
        getattr(owner(strategy, row), row.name)
    assert str(info.value).endswith(f".{row.message}")
    assert row.advice in str(info.value)
    assert not hasattr(owner(strategy, row), row.name)


def check_served_by_tf2(strategy, row, r):
    """A member TF2 still serves: no warning, not shadowed by the table, a real value."""
    del r
    value = assert_no_warning(lambda: getattr(owner(strategy, row), row.name))
    for cls in type(owner(strategy, row)).__mro__:
        if row.name in vars(cls):
            assert not isinstance(vars(cls)[row.name], _members._Served)  # pylint: disable=protected-access
            break
    assert value is not None


def check_row(strategy, row, shim, r):
    if row.kind == _members.RENAMED:
        check_renamed(strategy, row, r)
    elif row.kind == _members.GONE:
        check_gone(strategy, row, r)
    elif row.impl is None:
        check_served_by_tf2(strategy, row, r)
    else:
        assert_no_warning(lambda: CHECKS[(row.scope, row.name, shim)](strategy, r))


def rows(shim):
    return _members.rows(shim, _members.STRATEGY) + _members.rows(shim, _members.EXTENDED)


def run_all_checks(shim, r):
    """Every row's check on `shim` in `r`'s mode: {row id: "ok" or the failure}."""
    strategy = make_strategy(shim)
    results = {}
    for row in rows(shim):
        try:
            check_row(strategy, row, shim, r)
            results[row_id(row, shim)] = "ok"
        except BaseException:  # pylint: disable=broad-except
            results[row_id(row, shim)] = traceback.format_exc()
    return results


# The graph-mode run of every shim, each in a graph of its own: one subprocess,
# since disable_v2_behavior() is process-wide.
_GRAPH_RUN = """
import faulthandler, json, sys
faulthandler.dump_traceback_later(240, exit=True)  # a stall shows its stack
from compat_distribute.testing import devices
devices.set_virtual_devices(8)
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()
from tests.shims import test_members as m
results = {}
for shim in m.SHIMS:
    with tf.Graph().as_default():
        results.update(m.run_all_checks(shim, m.Graph()))
print("RESULTS " + json.dumps(results))
sys.stdout.flush()
from compat_distribute import _exit; _exit.end_process(0)  # atexit clean-up, then no TF teardown
"""

_GRAPH_RESULTS = {}


def graph_results(run_python):
    """{row id: "ok" or the failure} of every shim's rows in graph mode, run once."""
    if not _GRAPH_RESULTS:
        result = run_python(_GRAPH_RUN, timeout=300)
        lines = [l for l in result.stdout.splitlines() if l.startswith("RESULTS ")]
        assert lines, f"graph-mode run failed:\n{result.stderr[-4000:]}"
        _GRAPH_RESULTS.update(json.loads(lines[-1][len("RESULTS "):]))
    return _GRAPH_RESULTS


@pytest.fixture(scope="module", name="strategies")
def strategies_fixture():
    return {shim: make_strategy(shim) for shim in SHIMS}


CASES = [(shim, row) for shim in SHIMS for row in rows(shim)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shim, row", CASES, ids=[row_id(r, s) for s, r in CASES])
def test_row_claim_holds(strategies, run_python, shim, row, mode):
    if mode == "eager":
        check_row(strategies[shim], row, shim, Eager())
    else:
        outcome = graph_results(run_python)[row_id(row, shim)]
        assert outcome == "ok", outcome


@pytest.mark.parametrize("shim", SHIMS)
def test_reduce_along_an_axis_past_the_rank_fails_with_its_cause_first(strategies, shim):
    # Inside a tf.function, TensorFlow's own error came after "in user code:" and
    # AutoGraph's frames.
    strategy = strategies[shim]

    @tf.function
    def step():
        return strategy.reduce("SUM", strategy.run(lambda: tf.ones([2, 2])), axis=5)

    with pytest.raises(ValueError) as info:
        step()
    assert str(info.value) == (
        "reduce: axis=5 is out of range for a value of rank 2: Invalid reduction dimension 5 "
        "for input with 2 dimensions. Pass an axis from -2 to 1 to also reduce each replica's "
        "value along it, or axis=None to reduce across replicas only."
    )


def test_the_table_has_one_row_per_member_scope_and_shim():
    keys = [(r.scope, r.name, b) for r in _members.TABLE for b in r.shims]
    assert len(keys) == len(set(keys))


def test_every_v1_member_of_tf_has_a_row():
    """The TF1 classes still shipped in TF 2.21 list no member the table misses."""
    v1 = {
        _members.TPU: tf.compat.v1.distribute.experimental.TPUStrategy,
        _members.MWMS: tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy,
    }
    for shim, cls in v1.items():
        public = {n for n in dir(cls) if not n.startswith("_")}
        named = {r.name for r in _members.rows(shim, _members.STRATEGY)}
        assert public - named == set(), shim


def test_every_v1_implementation_has_a_behaviour_check():
    implemented = {
        (r.scope, r.name, shim)
        for r in _members.TABLE
        for shim in r.shims
        if r.kind == _members.WORKS and r.impl is not None
    }
    assert implemented == set(CHECKS)


def test_migration_table_lists_every_changed_row():
    table = _members.migration_table()
    for row in _members.TABLE:
        if row.kind != _members.WORKS or row.impl is not None:
            assert f".{row.name}` |" in table
    assert (
        "| `strategy.experimental_run_v2` | TPU and MultiWorkerMirrored | renamed in TF 2.2 (warns) | use `run` |"
        in table
    )
    assert (
        "| `strategy.experimental_run` | TPU | works as in TF1 | runs `fn` on "
        "`input_iterator.get_next()` inside a `tf.function` or a TF1 graph, or eagerly when "
        "`fn` is a `tf.function` (as TF2's `run`); a plain Python `fn` in eager mode raises "
        "NotImplementedError naming `tf.function`, as TF1 did |"
    ) in table


# Point 9: inside a tf.function, a renamed member warns at the user's line.

_USER_MODULE = '''\
import tensorflow as tf


def train(strategy):
    @tf.function
    def step():
        return strategy.experimental_run_v2(lambda: tf.constant(1.0))

    return step()
'''


@pytest.fixture(name="user_module", scope="module")
def user_module_fixture(tmp_path_factory):
    import importlib
    import sys

    where = tmp_path_factory.mktemp("user_code")
    (where / "legacy_user_code.py").write_text(_USER_MODULE)
    sys.path.insert(0, str(where))
    try:
        yield importlib.import_module("legacy_user_code")
    finally:
        sys.path.remove(str(where))
        del sys.modules["legacy_user_code"]


def test_renamed_member_in_a_tf_function_warns_at_the_users_line(strategies, user_module):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        user_module.train(strategies[_members.MWMS])
    assert [(w.category, w.filename, w.lineno) for w in caught] == [
        (DeprecationWarning, user_module.__file__, 7)
    ]


def test_a_module_filter_turns_the_warning_into_an_error_at_the_users_module(
    strategies, user_module
):
    # What `-W error::DeprecationWarning:legacy_user_code` sets up.
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=DeprecationWarning, module="legacy_user_code")
        with pytest.raises(Exception) as info:  # pylint: disable=broad-except
            user_module.train(strategies[_members.MWMS])
    # AutoGraph re-raises errors in traced code as a StagingError quoting the user's line.
    assert type(info.value).__name__ in ("DeprecationWarning", "StagingError")
    assert "DeprecationWarning: experimental_run_v2 is deprecated; use run" in str(info.value)
    assert f'{user_module.__file__}", line 7' in str(info.value)
