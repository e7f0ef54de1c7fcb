"""The smoke checks, one function a row of `table.CHECKS`.

They use the V1 surface on purpose (`experimental_run_v2`, `reduce` without `axis`).
"""

import os
import shutil
import tempfile
import time

import numpy as np
import tensorflow as tf


class CheckFailed(Exception):
    """A check measured something other than what it expected."""


class Skip(Exception):
    """The hardware cannot run this check; not a failure."""


def _expect(what, got, want):
    if got != want:
        raise CheckFailed(f"{what}: expected {want!r}, got {got!r}")


def _local(strategy, value):
    return [np.asarray(v) for v in strategy.experimental_local_results(value)]


def _host_input():
    # Batches stay on the host's CPU until a step reads them (the dataset
    # check covers fetching to the devices). TensorFlow still builds its
    # multi-device iterator here, over copies of the host's CPU.
    return tf.distribute.InputOptions(experimental_fetch_to_device=False)


def _smallest(strategy, value):
    return int(np.min(np.concatenate([np.ravel(v) for v in _local(strategy, value)])))


def _in_function(fn):
    """Calls `fn()` inside a `tf.function`: a TPU's `run` must be traced."""
    return tf.function(fn)()


def check_replicas(target, measured):
    del measured
    strategy = target.strategy
    n = strategy.num_replicas_in_sync
    _expect("num_replicas_in_sync", n, target.replicas)
    devices = len(strategy.extended.worker_devices)
    _expect("len(extended.worker_devices)", devices, target.replicas)
    return f"{n} replicas in sync on {devices} worker devices"


def check_per_replica_values(target, measured):
    del measured
    strategy = target.strategy

    def replica_fn():
        ctx = tf.distribute.get_replica_context()
        return tf.cast(ctx.replica_id_in_sync_group, tf.int32) * 10

    # The V1 name: warns, then runs as `run`.
    result = _in_function(lambda: strategy.experimental_run_v2(replica_fn))
    values = [int(v) for v in _local(strategy, result)]
    _expect(
        "per-replica values (10 * replica id)", values, [10 * i for i in range(target.replicas)]
    )
    return f"experimental_run_v2 gave 10*replica_id = {_short(values)}"


def check_all_reduce(target, measured):
    del measured
    strategy = target.strategy
    n = target.replicas
    total = n * (n + 1) // 2  # replicas contribute 1, 2, ..., n

    def replica_fn():
        ctx = tf.distribute.get_replica_context()
        mine = tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32)
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, mine), mine

    summed, mine = _in_function(lambda: strategy.run(replica_fn))
    sums = [float(v) for v in _local(strategy, summed)]
    _expect("all_reduce(SUM) of 1..n in each replica", sums, [float(total)] * n)
    # V1 `reduce` without `axis`.
    reduced = float(strategy.reduce(tf.distribute.ReduceOp.SUM, mine))
    _expect("strategy.reduce(SUM, 1..n)", reduced, float(total))
    mean = float(strategy.reduce(tf.distribute.ReduceOp.MEAN, mine))
    _expect("strategy.reduce(MEAN, 1..n)", mean, (n + 1) / 2)
    return f"sum of 1..{n} = {total:g} in all {n} replicas; reduce SUM {reduced:g}, MEAN {mean:g}"


def check_run_steps(target, measured):
    del measured
    strategy = target.strategy
    n = target.replicas
    steps = target.steps_per_run
    # A TPU strategy knows its steps_per_run (V1 attribute) and run_steps
    # defaults to it; other strategies are told.
    own_steps = getattr(strategy, "steps_per_run", None)
    if own_steps is not None:
        _expect("strategy.steps_per_run", own_steps, steps)
    steps_arg = None if own_steps is not None else steps
    with strategy.scope():
        counter = tf.Variable(
            0,
            dtype=tf.int64,
            synchronization=tf.VariableSynchronization.ON_WRITE,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
    # Batch b holds n*b .. n*b + n-1: one element per replica, so the values
    # seen in the last step tell which batch that step consumed.
    dataset = tf.data.Dataset.range(1_000_000).batch(n, drop_remainder=True)

    def step(batch):
        counter.assign_add(1)
        return batch

    iterator = target.keep(iter(strategy.experimental_distribute_dataset(dataset, _host_input())))
    last = strategy.run_steps(step, iterator, steps_arg)
    _expect("counter after run_steps", int(counter.numpy()), steps)
    _expect("first value of the last batch", _smallest(strategy, last), n * (steps - 1))

    # TF1's own loop, over a V1 iterator.
    v1_iterator = target.keep(strategy.make_dataset_iterator(dataset))
    v1_iterator.initialize()

    def v1_step(ctx, inputs):
        ctx.set_last_step_output("batch", strategy.run(step, args=(inputs,)))

    ctx = strategy.extended.experimental_run_steps_on_iterator(
        v1_step, v1_iterator, iterations=steps
    )
    _expect("counter after experimental_run_steps_on_iterator", int(counter.numpy()), 2 * steps)
    first = _smallest(strategy, ctx.last_step_outputs["batch"])
    _expect("first value of its last batch", first, n * (steps - 1))
    return (
        f"counter 0 -> {steps} after run_steps, -> {2 * steps} after "
        f"experimental_run_steps_on_iterator (steps_per_run={steps})"
    )


def check_logical_devices(target, measured):
    del measured
    if target.split_strategy is None:
        raise Skip("this hardware has one logical device per replica")
    strategy, cores_per_replica = target.split_strategy()
    x = tf.reshape(tf.range(8 * cores_per_replica * 2, dtype=tf.float32), [8, -1])

    @tf.function
    def step():
        def replica_fn():
            split = strategy.experimental_split_to_logical_devices(x, [1, cores_per_replica])
            return split * 2.0

        return strategy.run(replica_fn)

    outs = _local(strategy, step())
    for out in outs:
        if not np.array_equal(out, x.numpy() * 2.0):
            raise CheckFailed("split_to_logical_devices changed the values it split")
    return (
        f"{strategy.num_replicas_in_sync} replicas x {cores_per_replica} logical devices; "
        f"a [8, {x.shape[1]}] tensor split on dim 1 kept its values"
    )


def check_dataset(target, measured):
    del measured
    strategy = target.strategy
    n = target.replicas
    per_replica = 2
    dataset = tf.data.Dataset.range(4 * n).batch(per_replica * n)
    iterator = target.keep(strategy.make_dataset_iterator(dataset))  # V1
    iterator.initialize()
    seen = []
    for batch_index in range(2):
        parts = _local(strategy, iterator.get_next())
        sizes = [int(p.shape[0]) for p in parts]
        _expect(f"per-replica batch sizes of batch {batch_index}", sizes, [per_replica] * n)
        seen.extend(int(v) for p in parts for v in p)
    _expect("elements seen over 2 global batches", sorted(seen), list(range(4 * n)))
    return (
        f"global batch {per_replica * n} -> {n} x {per_replica} per replica; "
        f"2 batches delivered all {4 * n} elements once"
    )


def check_checkpoint(target, measured):
    del measured
    strategy = target.strategy
    with strategy.scope():
        weights = tf.Variable(tf.random.stateless_normal([16, 8], seed=[1, 2]))
        momentum = tf.Variable(tf.random.stateless_normal([16, 8], seed=[3, 4]))
        step = tf.Variable(12345, dtype=tf.int64)
    variables = {"weights": weights, "momentum": momentum, "step": step}
    checkpoint = tf.train.Checkpoint(**variables)
    saved = {k: v.numpy().copy() for k, v in variables.items()}
    directory = tempfile.mkdtemp(prefix="compat_distribute_smoke_")
    try:
        path = checkpoint.save(os.path.join(directory, "ckpt"))
        for v in variables.values():
            v.assign(tf.zeros_like(v))
        checkpoint.restore(path).assert_consumed()
        for name, value in variables.items():
            restored = value.numpy()
            if restored.tobytes() != saved[name].tobytes():
                raise CheckFailed(f"{name} differs after restore from {path}")
        size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    values = sum(v.size for v in saved.values())
    return f"{len(saved)} variables ({values} values, {size} bytes) restored bit-identically"


# At least this many steps are timed, in at least 5 calls: enough for a steady
# rate (the first call, which traces, is not timed); more only costs CPU.
TRAIN_STEPS = 20


def check_training(target, measured):
    strategy = target.strategy
    n = target.replicas
    steps = target.steps_per_run
    global_batch = 8 * n
    features = tf.random.stateless_normal([global_batch * 4, 4], seed=[5, 6])
    true_w = tf.constant([[1.0], [-2.0], [3.0], [0.5]])
    labels = tf.matmul(features, true_w) + 1.0
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    dataset = dataset.repeat().batch(global_batch, drop_remainder=True)
    with strategy.scope():
        # Gradients are all-reduced before the update, so every replica
        # applies the same one: updating from the first replica suffices.
        kw = dict(aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        w = tf.Variable(tf.zeros([4, 1]), **kw)
        b = tf.Variable(tf.zeros([1]), **kw)
    learning_rate = 0.1

    def loss_of(x, y):
        return tf.reduce_sum(tf.square(tf.matmul(x, w) + b - y)) / global_batch

    def train_step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = loss_of(x, y)
        grads = tape.gradient(loss, [w, b])
        ctx = tf.distribute.get_replica_context()
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        w.assign_sub(learning_rate * grads[0])
        b.assign_sub(learning_rate * grads[1])
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss)

    def full_loss():
        return float(tf.reduce_mean(tf.square(tf.matmul(features, w) + b - labels)))

    before = full_loss()
    iterator = target.keep(iter(strategy.experimental_distribute_dataset(dataset, _host_input())))
    steps_arg = None if getattr(strategy, "steps_per_run", None) else steps
    strategy.run_steps(train_step, iterator, steps_arg)  # traces (and compiles) the loop
    calls = max(5, -(-TRAIN_STEPS // steps))
    start = time.perf_counter()
    for _ in range(calls):
        last = strategy.run_steps(train_step, iterator, steps_arg)
    float(_local(strategy, last)[0])  # wait for the device
    elapsed = time.perf_counter() - start
    after = full_loss()
    total_steps = steps * (calls + 1)
    measured["steps_per_second"] = round(steps * calls / elapsed, 1)
    if not after < 0.1 * before:
        raise CheckFailed(
            f"loss did not fall to under a tenth: {before:.4g} -> {after:.4g} "
            f"over {total_steps} steps"
        )
    return (
        f"linear model, loss {before:.4g} -> {after:.4g} over {total_steps} steps; "
        f"{measured['steps_per_second']:g} steps/s"
    )


def _short(values, limit=8):
    if len(values) <= limit:
        return str(values)
    return f"[{values[0]}, {values[1]}, ..., {values[-1]}]"
