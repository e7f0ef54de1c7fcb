"""The conformance table of docs/fake-tpu.md (its block is kept current by tests/docs)."""

import conformance_table

# TensorFlow's test files the rows restate.
TF_TEST_FILES = (
    "tpu_strategy_test.py",
    "strategy_common_test.py",
    "custom_training_loop_input_test.py",
    "values_test.py",
    "input_lib_test.py",
    "tpu_strategy_model_parallelism_test.py",
    "metrics_v1_test.py",
)


def test_every_behaviour_names_its_tensorflow_test_and_by_design_rows_give_a_reason():
    rows = conformance_table.rows()
    assert len(rows) >= 30
    passing = ("pass", "pass, device names differ", "pass in strict mode only")
    for behaviour, tf_test, result in rows:
        assert tf_test.split()[0] in TF_TEST_FILES, tf_test
        reasoned = result.startswith("by design: ") and len(result) > 40
        assert result in passing or reasoned, behaviour
    counts = conformance_table.counts()
    assert sum(counts.values()) == len(rows)
    assert counts["by design"] <= 3  # the by-design list stays short


def test_rows_that_leave_out_tpu_device_names_or_need_strict_mode_say_so():
    results = {behaviour: result for behaviour, _, result in conformance_table.rows()}
    worker_devices = "A one-core strategy on core 0 has the one worker device"
    (subset,) = [b for b in results if b.startswith(worker_devices)]
    assert results[subset] == "pass, device names differ"
    (compile_error,) = [b for b in results if b.startswith("A step with an op XLA cannot")]
    assert results[compile_error] == "pass in strict mode only"
    assert conformance_table.counts()["pass, device names differ"] >= 6
