"""Variables a step creates on its first call, on the fake v3-8 traced once per step.

A TPU computes a new variable's initial value once and starts every core's copy
from it, so copies are equal (a random initial value too), each on its core. The
one trace makes such a variable outside itself, as tf.function lifts a variable's
initialisation, so the step is traced once on its first call too (MirroredStrategy's
threads: twice, once per replica each). A variable whose initial value reads the
step's arguments or another variable cannot be lifted out of the trace: that step
runs per replica, as MirroredStrategy runs it, with a warning.
"""

import json
import os
import warnings

import numpy as np
import pytest
import step_variables_programs as programs
import tensorflow as tf

from compat_distribute.testing._fake_tpu import replicate

REPLICAS = 8
CORES = [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(REPLICAS)]
ON_READ = tf.VariableSynchronization.ON_READ
ON_WRITE = tf.VariableSynchronization.ON_WRITE
Aggregation = tf.VariableAggregation


@pytest.fixture(name="unpacked", scope="module")
def unpacked_fixture(new_v3_8):
    """Variables not packed in eager mode, as TF's tests set TPUStrategy."""
    strategy = new_v3_8(replicate.ONCE)
    strategy._enable_packed_variable_in_eager_mode = False  # pylint: disable=protected-access
    return strategy


def _local(strategy, value):
    return [np.asarray(v).tolist() for v in strategy.experimental_local_results(value)]


def _devices(strategy, variable):
    return [v.device for v in strategy.experimental_local_results(variable)]


@pytest.fixture(name="no_warnings")
def no_warnings_fixture():
    """Fails the test on any warning: a step that creates variables earns none."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# The TPU guide's custom loop.


def _assert_trains_as_one_device(fake, one_device):
    np.testing.assert_allclose(fake["losses"], one_device["losses"], rtol=1e-5)
    for fake_weight, weight in zip(fake["weights"], one_device["weights"]):
        np.testing.assert_allclose(fake_weight, weight, rtol=1e-5, atol=1e-6)
    assert fake["mean_loss"] == pytest.approx(one_device["mean_loss"], rel=1e-5)
    assert fake["iterations"] == one_device["iterations"] == programs.STEPS
    # Every slot has one copy on each core, all equal.
    assert fake["slots"]
    for copies in fake["slots"]:
        assert [device for device, _ in copies] == CORES
        assert all(value == copies[0][1] for _, value in copies)
    # The step is traced once, its variables made outside the trace; one device
    # traces it twice, as tf.function traces a function that makes variables.
    assert (fake["step_traces"], fake["function_traces"]) == (1, 1)
    assert (one_device["step_traces"], one_device["function_traces"]) == (2, 2)


@pytest.mark.usefixtures("no_warnings")
@pytest.mark.parametrize("optimizer", programs.OPTIMIZERS)
def test_guide_loop_builds_slots_in_the_step_and_trains_as_one_device(once, optimizer):
    fake = programs.guide_loop(once, optimizer)
    one_device = programs.guide_loop(tf.distribute.OneDeviceStrategy("/cpu:0"), optimizer)
    _assert_trains_as_one_device(fake, one_device)


def _run_programs(run_program, program, env=None):
    """RESULT of `python step_variables_programs.py PROGRAM`, in a process of its own."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "step_variables_programs.py")
    # Forked from the warm interpreter of its environment (the tf-keras one's is shared).
    result = run_program([path, program], timeout=300, env=env, shared_env=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_guide_loop_under_tf_keras_trains_as_one_device(run_program):
    # tf.keras is tf-keras when TF_USE_LEGACY_KERAS=1 is set before TensorFlow's import.
    report = _run_programs(run_program, "one_host", env={"TF_USE_LEGACY_KERAS": "1"})
    assert report["keras"] == "tf_keras"
    assert report["warnings"] == []
    assert sorted(report["runs"]) == sorted(programs.OPTIMIZERS)
    for fake, one_device in report["runs"].values():
        _assert_trains_as_one_device(fake, one_device)


def test_guide_loop_on_a_pod_builds_slots_on_every_host_and_trains_as_one_device(run_program):
    # A pod runs the step per replica (MirroredStrategy's threads over its hosts'
    # cores); its variables are made as on one host: one initial value, a copy a core.
    report = _run_programs(run_program, "pod")
    assert report["warnings"] == []
    for optimizer in programs.OPTIMIZERS:
        pod = report[optimizer]
        one_device = programs.guide_loop(tf.distribute.OneDeviceStrategy("/cpu:0"), optimizer)
        np.testing.assert_allclose(pod["losses"], one_device["losses"], rtol=1e-5)
        for pod_weight, weight in zip(pod["weights"], one_device["weights"]):
            np.testing.assert_allclose(pod_weight, weight, rtol=1e-5, atol=1e-6)
        assert pod["slots"]
        for copies in pod["slots"]:
            hosts = [device.split("/device:")[0] for device, _ in copies]
            assert hosts == ["/job:worker/replica:0/task:0"] * 4 + ["/job:worker/replica:0/task:1"] * 4
            assert all(value == copies[0][1] for _, value in copies)
        assert (pod["function_traces"], pod["step_traces"]) == (1, 1), pod  # pods trace once too


# tf.Variable of every synchronization and aggregation, made on the first call.

KINDS = [
    (ON_WRITE, Aggregation.NONE),
    (ON_WRITE, Aggregation.SUM),
    (ON_WRITE, Aggregation.MEAN),
    (ON_WRITE, Aggregation.ONLY_FIRST_REPLICA),
    (ON_READ, Aggregation.SUM),
    (ON_READ, Aggregation.MEAN),
    (ON_READ, Aggregation.ONLY_FIRST_REPLICA),
]


def _kind_step(strategy, synchronization, aggregation):
    """Two calls of a step that makes a variable from a random value on its first
    call; each call adds 3 x replica id to an ON_READ variable (replica-local) and
    1 to an ON_WRITE one (through its aggregation). Returns the value the first
    call read, each call's copies, the cross-replica reads and the trace count."""
    made, traces = [], []

    def replica_fn():
        traces.append(1)
        if not made:
            made.append(tf.Variable(
                tf.random.normal([2], seed=7), trainable=False,
                synchronization=synchronization, aggregation=aggregation,
            ))
        variable = made[0]
        before = tf.identity(variable.read_value())
        replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
        if synchronization == ON_READ:
            variable.assign_add(tf.fill([2], 3.0 * tf.cast(replica_id, tf.float32)))
        else:
            variable.assign_add(tf.ones([2]))
        return before

    @tf.function
    def step():
        return strategy.run(replica_fn)

    first = _local(strategy, step())
    after_one = _local(strategy, made[0])
    step()
    return {
        "first read": first,
        "copies": [after_one, _local(strategy, made[0])],
        "read": made[0].numpy().tolist(),
        "devices": _devices(strategy, made[0]),
        "traces": (len(traces), step.experimental_get_tracing_count()),
    }


@pytest.mark.usefixtures("no_warnings")
@pytest.mark.parametrize(
    "synchronization, aggregation", KINDS, ids=[f"{s.name}-{a.name}" for s, a in KINDS]
)
def test_variable_made_in_the_step_has_a_tpus_values_and_placement(
    once, per_replica, synchronization, aggregation
):
    got = _kind_step(once, synchronization, aggregation)
    initial = got["first read"][0]
    # One initial value for every copy, one copy on each core.
    assert got["first read"] == [initial] * REPLICAS
    assert got["devices"] == CORES
    assert got["traces"] == (1, 1)
    start = np.array(initial)
    if synchronization == ON_READ:
        # Each replica's own copy; a cross-replica read aggregates them.
        added = 3.0 * np.arange(REPLICAS)
        for calls, copies in enumerate(got["copies"], start=1):
            np.testing.assert_allclose(copies, start + calls * added[:, None], rtol=1e-6)
        expected = {
            Aggregation.SUM: REPLICAS * start + 2 * added.sum(),
            Aggregation.MEAN: start + 2 * added.mean(),
            Aggregation.ONLY_FIRST_REPLICA: start,  # replica 0's copy
        }[aggregation]
    else:
        # Mirrored: the same value on every core after every update.
        step_sum = REPLICAS if aggregation == Aggregation.SUM else 1
        for calls, copies in enumerate(got["copies"], start=1):
            np.testing.assert_allclose(copies, [start + calls * step_sum] * REPLICAS, rtol=1e-6)
        expected = start + 2 * step_sum
    np.testing.assert_allclose(got["read"], expected, rtol=1e-6)
    # MirroredStrategy's threads (the per-replica mode) give the same; tf.function
    # traces the step twice, each trace once per replica.
    per_replica_got = _kind_step(per_replica, synchronization, aggregation)
    offset = np.array(per_replica_got["first read"][0]) - start  # its own random draw
    for copies, its_copies in zip(got["copies"], per_replica_got["copies"]):
        np.testing.assert_allclose(np.array(its_copies) - offset, copies, rtol=1e-5, atol=1e-5)
    assert per_replica_got["traces"] == (2 * REPLICAS, 2)


# TensorFlow's tests that create a variable inside `run` in a tf.function, in our words.


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_random_initial_value_made_in_run_is_the_same_on_every_core(once, unpacked, packed):
    # values_test.py testInitializedToSameValueInsideEagerRun (TPUStrategy, packed or not).
    strategy = once if packed else unpacked
    made = []

    def replica_fn():
        if not made:
            made.append(tf.Variable(tf.random.normal([])))

    @tf.function
    def step():
        strategy.run(replica_fn)

    tf.random.set_seed(None)
    step()
    copies = _local(strategy, made[0])
    assert len(copies) == REPLICAS and copies == [copies[0]] * REPLICAS


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_variables_made_in_init_scope_of_a_step_start_from_each_other(once, unpacked, packed):
    # values_test.py testInitScope: a step made a tf.function makes two MEAN
    # variables in init_scope on its first call, the second from the first's read.
    strategy = once if packed else unpacked
    made = {}

    @tf.function
    def add_two():
        with tf.init_scope():
            if not made:
                made["w"] = tf.Variable(0.0, aggregation=Aggregation.MEAN)
                made["v"] = tf.Variable(made["w"].read_value(), aggregation=Aggregation.MEAN)
        return made["v"].assign_add(2.0)

    assert _local(strategy, strategy.run(add_two)) == [2.0] * REPLICAS
    assert _local(strategy, made["v"]) == [2.0] * REPLICAS
    assert _local(strategy, made["w"]) == [0.0] * REPLICAS


def test_variable_made_before_a_merge_call_reads_zero_everywhere(once):
    # mirrored_variable_test.py: a replica function makes a variable, then calls
    # merge_call; inside a tf.function, every replica reads the new copy's 0.
    made = []

    def replica_fn():
        if not made:
            made.append(tf.Variable(tf.zeros([])))
        tf.distribute.get_replica_context().merge_call(lambda _: None)
        return made[0].read_value()

    @tf.function
    def step():
        return once.experimental_local_results(once.run(replica_fn))

    assert [float(v) for v in step()] == [0.0] * REPLICAS


# Initial values one trace cannot lift: the step runs per replica.


@pytest.fixture(name="fresh_once")
def fresh_once_fixture(new_v3_8):
    """A strategy of its own: each strategy warns of a reason once."""
    return new_v3_8(replicate.ONCE)


def test_initial_value_from_the_steps_argument_runs_the_step_per_replica(fresh_once, per_replica):
    def run(strategy):
        made = {}
        dataset = tf.data.Dataset.range(4 * REPLICAS).map(lambda i: tf.cast(i, tf.float32)).batch(REPLICAS)
        iterator = iter(strategy.experimental_distribute_dataset(dataset))

        def replica_fn(x):
            if "ones" not in made:  # liftable: made in the one trace, which then stops
                made["ones"] = tf.Variable(tf.ones([2]))
            if "from x" not in made:  # from the argument: not liftable
                made["from x"] = tf.Variable(x + 10.0)
            made["ones"].assign_add(tf.ones([2]))
            made["from x"].assign_add(x)
            return made["ones"].read_value() + made["from x"].read_value()

        @tf.function
        def step(iterator):
            return strategy.run(replica_fn, args=(next(iterator),))

        outputs = [_local(strategy, step(iterator)) for _ in range(2)]
        return outputs, [_local(strategy, made[name]) for name in ("ones", "from x")]

    with pytest.warns(RuntimeWarning) as warned:
        got = run(fresh_once)
    assert [str(w.message) for w in warned] == [
        "The fake TPU traces this step once per replica (a variable it creates takes its "
        "initial value from its arguments or variables); trace mode 'once' does not apply there."
    ]
    assert got == run(per_replica)
    outputs, (ones, from_x) = got
    # The first variable, made before the trace stopped, started at 1 on every core.
    assert ones == [[3.0, 3.0]] * REPLICAS
    # MirroredStrategy starts every copy from the first replica's x + 10 (x = 0).
    assert from_x == [[10.0 + i + (REPLICAS + i)] for i in range(REPLICAS)]
    assert outputs[0] == [[2.0 + 10.0 + i] * 2 for i in range(REPLICAS)]


@pytest.mark.parametrize("initial", ["a read + 1", "the variable"])
def test_initial_value_reading_another_variable_runs_the_step_per_replica(fresh_once, initial):
    once = fresh_once
    with once.scope():
        base = tf.Variable(7.0)
    made = []

    def replica_fn():
        if not made:
            base.assign_add(1.0)  # the new variable reads it after this, as the step runs
            made.append(tf.Variable(base.read_value() + 1.0 if initial == "a read + 1" else base))
        return made[0].read_value()

    @tf.function
    def step():
        return once.run(replica_fn)

    expected = 9.0 if initial == "a read + 1" else 8.0
    with pytest.warns(RuntimeWarning, match="takes its initial value from its arguments or variables"):
        assert _local(once, step()) == [expected] * REPLICAS
    assert _local(once, made[0]) == [expected] * REPLICAS
    assert _devices(once, made[0]) == CORES
