"""One trace per step: the fake TPU traces the replica function once, as a TPU does.

Each check runs on two v3-8 strategies, one per trace mode, and the values of
the "once" mode must equal the per-replica mode's (MirroredStrategy's threads).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from compat_distribute.testing._fake_tpu import collectives
from compat_distribute.testing._fake_tpu import replicate

REPLICAS = 8


@pytest.fixture(name="both", scope="module")
def both_fixture(once, per_replica):
    return {replicate.ONCE: once, replicate.PER_REPLICA: per_replica}


@pytest.fixture(name="rings", params=["one ring", "two rings"])
def rings_fixture(request, monkeypatch):
    """The one trace's sums as one ring over the replicas or, as from 16 replicas
    on, two: within pairs of replicas, then across the pairs (groups of 2 and 4)."""
    if request.param == "two rings":
        monkeypatch.setattr(collectives, "TWO_STAGE_MIN_REPLICAS", 2)
    return request.param


def _local(strategy, value):
    return [np.asarray(v).tolist() for v in strategy.experimental_local_results(value)]


def _per_replica_input(strategy, array):
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(array[ctx.replica_id_in_sync_group])
    )


def test_body_is_traced_once_per_step_function(both):
    counts = {}
    for mode, strategy in both.items():
        traces = []

        def fn():
            traces.append(1)  # a Python side effect: once per trace
            return tf.distribute.get_replica_context().replica_id_in_sync_group

        @tf.function
        def step(fn=fn, strategy=strategy):
            return strategy.run(fn)

        assert _local(strategy, step()) == list(range(REPLICAS))
        step()  # no retrace
        counts[mode] = len(traces)
    assert counts == {replicate.ONCE: 1, replicate.PER_REPLICA: REPLICAS}


def test_eager_run_of_a_tf_function_traces_once(once):
    traces = []

    @tf.function
    def fn():
        traces.append(1)
        return tf.distribute.get_replica_context().replica_id_in_sync_group * 2

    assert _local(once, once.run(fn)) == [2 * i for i in range(REPLICAS)]
    assert _local(once, once.run(fn)) == [2 * i for i in range(REPLICAS)]
    assert len(traces) == 1


def test_replica_index_has_no_static_value(both):
    static = {}
    for mode, strategy in both.items():
        seen = []

        def fn():
            seen.append(tf.get_static_value(tf.distribute.get_replica_context().replica_id_in_sync_group))
            return tf.constant(0)

        tf.function(lambda fn=fn, strategy=strategy: strategy.run(fn))()
        static[mode] = seen
    assert static[replicate.ONCE] == [None]
    assert static[replicate.PER_REPLICA] == list(range(REPLICAS))


def test_all_reduce_and_all_gather_give_the_per_replica_values(both, rings):
    results = {}
    for mode, strategy in both.items():

        def fn():
            ctx = tf.distribute.get_replica_context()
            x = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0
            return (
                ctx.all_reduce("SUM", x),
                ctx.all_reduce("MEAN", [x, 2.0 * x]),
                ctx.all_reduce("SUM", tf.cast(ctx.replica_id_in_sync_group, tf.int64)),
                ctx.all_gather(tf.reshape(x, [1, 1]), axis=1),
            )

        out = tf.function(lambda fn=fn, strategy=strategy: strategy.run(fn))()
        results[mode] = tf.nest.map_structure(lambda v, s=strategy: _local(s, v), out)
    assert results[replicate.ONCE] == results[replicate.PER_REPLICA]
    total, means, int_total, gathered = results[replicate.ONCE]
    assert total == [36.0] * REPLICAS
    assert means == [[4.5] * REPLICAS, [9.0] * REPLICAS]
    assert int_total == [28] * REPLICAS
    assert gathered == [[[float(i) for i in range(1, REPLICAS + 1)]]] * REPLICAS


def test_merge_call_reduces_and_updates_as_per_replica(both, rings):
    results = {}
    for mode, strategy in both.items():
        with strategy.scope():
            v = tf.Variable(1.0)

        def merge_fn(strat, value, v=v):
            total = strat.extended.reduce_to("SUM", value, destinations=v)
            strat.extended.update(v, lambda var, t: var.assign_add(t), args=(total,))
            return total

        def fn(merge_fn=merge_fn):
            ctx = tf.distribute.get_replica_context()
            x = tf.cast(ctx.replica_id_in_sync_group, tf.float32)
            return ctx.merge_call(merge_fn, args=(x,))

        out = tf.function(lambda fn=fn, strategy=strategy: strategy.run(fn))()
        results[mode] = (_local(strategy, out), [float(c) for c in v.values])
    assert results[replicate.ONCE] == results[replicate.PER_REPLICA]
    assert results[replicate.ONCE] == ([28.0] * REPLICAS, [29.0] * REPLICAS)


def test_broadcast_gives_every_replica_the_first_replicas_value(once, rings):
    with once.scope():
        v = tf.Variable(0.0)

    def merge_fn(strat, value):
        return strat.extended.broadcast_to(value, destinations=v)

    def fn():
        ctx = tf.distribute.get_replica_context()
        x = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 5.0
        return ctx.merge_call(merge_fn, args=(x,))

    out = tf.function(lambda: once.run(fn))()
    assert _local(once, out) == [5.0] * REPLICAS


def test_each_replica_reads_and_writes_its_own_copy(both):
    results = {}
    for mode, strategy in both.items():
        with strategy.scope():
            mirrored = tf.Variable(10.0)
            local = tf.Variable(
                0.0,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
            )
            first = tf.Variable(0, dtype=tf.int64, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

        def fn(mirrored=mirrored, local=local, first=first):
            rid = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
            local.assign(rid * 3.0)
            first.assign_add(1)
            return mirrored + local

        def every_copy(local=local):
            ctx = tf.distribute.get_replica_context()
            # Read in cross-replica context, a sync-on-read variable sums its copies.
            merged = ctx.merge_call(lambda _, local=local: tf.convert_to_tensor(local))
            return tf.add_n([tf.identity(copy) for copy in local.values]), merged

        out = tf.function(lambda fn=fn, strategy=strategy: strategy.run(fn))()
        summed = tf.function(lambda fn=every_copy, strategy=strategy: strategy.run(fn))()
        results[mode] = (
            _local(strategy, out),
            [float(c) for c in local.values],
            float(local.read_value()),
            [int(c) for c in first.values],
            [_local(strategy, v) for v in summed],
        )
    assert results[replicate.ONCE] == results[replicate.PER_REPLICA]
    reads, copies, total, counts, summed = results[replicate.ONCE]
    assert reads == [10.0 + 3.0 * i for i in range(REPLICAS)]
    assert copies == [3.0 * i for i in range(REPLICAS)]
    assert total == 84.0
    assert counts == [1] * REPLICAS
    # Every replica reading every copy reads each copy once.
    assert summed == [[84.0] * REPLICAS, [84.0] * REPLICAS]


def _train_dense(strategy, steps):
    """Keras 3 SGD (momentum) on a Dense layer, gradients all-reduced; losses and kernel copies."""
    rng = np.random.RandomState(0)
    x = rng.rand(REPLICAS, 2, 3).astype("float32")
    y = rng.rand(REPLICAS, 2, 4).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(4, kernel_initializer="ones")])
        model.build((None, 3))
        optimizer = keras.optimizers.SGD(0.1, momentum=0.5)
        optimizer.build(model.trainable_variables)
    traces = []

    def step(x, y):
        traces.append(1)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2) / REPLICAS
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train(x, y):
        return strategy.reduce("SUM", strategy.run(step, args=(x, y)), axis=None)

    xs, ys = _per_replica_input(strategy, x), _per_replica_input(strategy, y)
    losses = [float(train(xs, ys)) for _ in range(steps)]
    kernel = model.trainable_variables[0].value
    return losses, [np.asarray(c) for c in kernel.values], int(optimizer.iterations.numpy()), len(traces)


@pytest.mark.requires_keras3  # Keras 3 SGD and its variables
def test_keras_sgd_update_gives_the_per_replica_weights(both, rings):
    once_losses, once_kernels, once_iterations, once_traces = _train_dense(both[replicate.ONCE], 3)
    losses, kernels, iterations, traces = _train_dense(both[replicate.PER_REPLICA], 3)
    np.testing.assert_allclose(once_losses, losses, rtol=1e-6)
    for copy in once_kernels:
        np.testing.assert_allclose(copy, kernels[0], rtol=1e-6)
    assert losses[2] < losses[0]
    assert (once_iterations, iterations) == (3, 3)
    assert (once_traces, traces) == (1, REPLICAS)


def test_mode_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(replicate.ENV, "once")
    assert replicate.mode_from_environment() == "once"
    monkeypatch.setenv(replicate.ENV, "")
    assert replicate.mode_from_environment() == replicate.DEFAULT_MODE
    monkeypatch.setenv(replicate.ENV, "twice")
    with pytest.raises(ValueError) as raised:
        replicate.mode_from_environment()
    assert str(raised.value).startswith(
        "COMPAT_DISTRIBUTE_FAKE_TPU_TRACE must be one of 'once', 'per_replica'; got 'twice'."
    )


def test_set_trace_mode_checks_its_arguments(once):
    with pytest.raises(ValueError, match=r"mode must be one of \('per_replica', 'once'\); got 'all'"):
        replicate.set_trace_mode(once, "all")
    with pytest.raises(TypeError, match="set_trace_mode needs a fake TPU strategy"):
        replicate.set_trace_mode(tf.distribute.get_strategy(), "once")
    assert once.extended.trace_mode == replicate.ONCE


def test_eager_python_function_runs_per_replica_with_a_warning(once):
    calls = []

    def fn():
        calls.append(1)
        return tf.constant(1)

    with pytest.warns(RuntimeWarning, match=r"once per replica \(a plain Python function run eagerly\)"):
        out = once.extended.call_for_each_replica(fn)
    assert len(calls) == REPLICAS
    assert _local(once, out) == [1] * REPLICAS


def test_per_replica_python_values_fall_back_instead_of_taking_replica_0s(once):
    # A trace takes tensors as inputs; a Python value that differs by replica
    # would be replica 0's in every replica, so the step runs per replica.
    ids = once.experimental_distribute_values_from_function(
        lambda ctx: ctx.replica_id_in_sync_group
    )

    @tf.function
    def step():  # ids captured, so they stay Python ints
        return once.run(lambda i: tf.constant(i) * 10, args=(ids,))

    with pytest.warns(RuntimeWarning, match="differs by replica"):
        values = step()
    assert _local(once, values) == [10 * r for r in range(REPLICAS)]


@pytest.mark.parametrize("two_rings", [False, True], ids=["one ring", "two rings"])
def test_collectives_in_a_while_loop_of_the_step_meet_across_replicas(run_python, two_rings):
    # In a subprocess: before the fix the replicas' collectives never met (a hang).
    result = run_python(f"""
        import tensorflow as tf
        from compat_distribute.testing import fake_tpu
        from compat_distribute.testing._fake_tpu import collectives

        if {two_rings}:
            collectives.TWO_STAGE_MIN_REPLICAS = 2
        with fake_tpu("v3-8"):
            strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver(""))
            with strategy.scope():
                total = tf.Variable(0.0, aggregation=tf.VariableAggregation.SUM)

            def step(rounds):
                ctx = tf.distribute.get_replica_context()
                x = tf.cast(ctx.replica_id_in_sync_group, tf.float32)

                def round_(i, summed, gathered):  # the source of `-c` is beyond AutoGraph
                    with tf.control_dependencies([total.assign_add(x)]):  # a merge_call, as
                        # a tf-keras metric's update_state on a TPU
                        return (i + 1, summed + ctx.all_reduce("SUM", x + 1.0),
                                gathered + ctx.all_gather(tf.reshape(x, [1]), axis=0))

                _, summed, gathered = tf.while_loop(
                    lambda i, *_: i < rounds, round_, (0, tf.constant(0.0), tf.zeros([8])))
                return summed, gathered

            sums, gathers = tf.function(lambda: strategy.run(step, (tf.constant(3),)))()
            print(sorted({{float(s) for s in strategy.experimental_local_results(sums)}}))
            print(sorted({{tuple(g.numpy().tolist()) for g in strategy.experimental_local_results(gathers)}}))
            print(sorted({{float(c) for c in total.values}}))
            # The README's way: an eager run of a tf.function step.
            ids = strategy.run(tf.function(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group))
            print([int(i) for i in strategy.experimental_local_results(ids)])
    """, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "[108.0]",  # 3 rounds of 1 + ... + 8
        f"[{tuple(3.0 * i for i in range(REPLICAS))}]",
        "[84.0]",  # 3 rounds of 0 + ... + 7, on every copy
        str(list(range(REPLICAS))),
    ]
    # AutoGraph converts the fake's own code inside a user's tf.function: none of it warns.
    assert "AutoGraph could not transform" not in result.stderr
