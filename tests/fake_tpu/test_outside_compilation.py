"""Outside compilation in a fake TPU step: mapped per shard, as a TPU's hosts run it.

`experimental_map_outside_compilation(f, x)` runs `f` on each logical core's
shard of a split `x`; a per-shard mean tells it apart from one call on the whole
tensor. `tf.compat.v1.tpu.outside_compilation` runs its computation in place.
"""

import logging

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.tpu import tpu_replication  # the map's only home (not in tf.*)

ROWS = np.arange(16, dtype=np.float32).reshape(8, 2)


def _centre(shard):
    return shard - tf.reduce_mean(shard)


def _run(strategy, fn, value):
    @tf.function
    def step(x):
        return strategy.experimental_local_results(strategy.run(fn, args=(x,)))

    return [t.numpy() for t in step(tf.constant(value))]


def test_a_mapped_computation_sees_each_core_its_own_shard(model_parallel):
    def step(x):
        halves = model_parallel.experimental_split_to_logical_devices(x, [2, 1])
        return tpu_replication.experimental_map_outside_compilation(_centre, halves)

    outputs = _run(model_parallel, step, ROWS)
    # Rows 0-3 centred on their mean 3.5, rows 4-7 on 11.5: each half is [-3.5 .. 3.5].
    half = np.arange(8, dtype=np.float32).reshape(4, 2) - 3.5
    assert len(outputs) == 4  # replicas
    for output in outputs:
        np.testing.assert_array_equal(output, np.concatenate([half, half]))


def test_a_two_way_split_maps_onto_every_tile_in_place(spmd):
    value = np.arange(32, dtype=np.float32).reshape(4, 8)

    def step(x):
        tiles = spmd.experimental_split_to_logical_devices(x, [2, 4])
        return tpu_replication.experimental_map_outside_compilation(
            lambda t: tf.broadcast_to(tf.reduce_sum(t), tf.shape(t)), tiles
        )

    (output,) = _run(spmd, step, value)
    # Each of the 8 tiles (2 rows x 2 columns) holds its own sum.
    expected = np.zeros_like(value)
    for r in range(0, 4, 2):
        for c in range(0, 8, 2):
            expected[r : r + 2, c : c + 2] = value[r : r + 2, c : c + 2].sum()
    np.testing.assert_array_equal(output, expected)


def test_unsplit_inputs_go_whole_to_every_shard(model_parallel):
    def step(x):
        halves = model_parallel.experimental_split_to_logical_devices(x, [2, 1])
        return tpu_replication.experimental_map_outside_compilation(
            lambda shard, offset: shard - offset, halves, tf.constant([100.0, 200.0])
        )

    outputs = _run(model_parallel, step, ROWS)
    np.testing.assert_array_equal(outputs[0], ROWS - [100.0, 200.0])


def test_an_input_that_is_not_split_is_refused_naming_the_split(model_parallel):
    def step(x):
        return tpu_replication.experimental_map_outside_compilation(_centre, x)

    with pytest.raises(ValueError) as info:
        _run(model_parallel, step, ROWS)
    assert (
        "experimental_map_outside_compilation maps its computation onto the shards of an "
        "input split over logical cores; none of these inputs is split. On the fake TPU, "
        "pass the output of strategy.experimental_split_to_logical_devices itself (ops in "
        "between drop its split); use tf.tpu.outside_compilation for unsplit inputs."
    ) in str(info.value)


def test_inputs_split_two_ways_are_refused(spmd):
    def step(x):
        rows = spmd.experimental_split_to_logical_devices(x, [8, 1])
        columns = spmd.experimental_split_to_logical_devices(x, [1, 8])
        return tpu_replication.experimental_map_outside_compilation(tf.add, rows, columns)

    with pytest.raises(ValueError, match=r"the inputs are split differently \(\[\(1, 8\), \(8, 1\)\]"):
        _run(spmd, step, np.zeros((8, 8), np.float32))


def test_a_shard_output_that_drops_the_split_dimension_is_refused(model_parallel):
    def step(x):
        halves = model_parallel.experimental_split_to_logical_devices(x, [2, 1])
        return tpu_replication.experimental_map_outside_compilation(tf.reduce_sum, halves)

    with pytest.raises(ValueError, match=r"output 0 of the computation has shape \(\) on each shard"):
        _run(model_parallel, step, ROWS)


def test_outside_compilation_runs_in_place_without_a_missing_context_warning(v3_8, caplog):
    def step(x):
        return tf.compat.v1.tpu.outside_compilation(lambda t: tf.strings.to_number(tf.strings.as_string(t)), x + 1)

    with caplog.at_level(logging.WARNING):
        outputs = _run(v3_8, step, 2.0)
    assert [float(o) for o in outputs] == [3.0] * 8
    assert not [r for r in caplog.records if "Outside compilation attempted" in r.getMessage()]


def test_outside_a_fake_step_tensorflow_keeps_its_own_behaviour():
    # No strategy: TensorFlow runs the computation once on the whole tensor.
    @tf.function
    def whole(x):
        return tpu_replication.experimental_map_outside_compilation(_centre, x)

    np.testing.assert_array_equal(whole(tf.constant(ROWS)).numpy(), ROWS - 7.5)
