"""The legacy corpus: TF1-era programs, unchanged, after `compat_distribute.install()`.

Each module beside this one is a program written as its era wrote it (its
docstring names the program it stands for). Here each runs on the fake TPU or
on a 2-worker local cluster, and must train: the exact number of steps its
logs report, and a loss that falls.
"""

import importlib
import math
import re

import pytest


def assert_trained(history, steps, *, falls_by=0.8):
    """`history` is [(step, loss)]: the logged steps are `steps`, the loss falls."""
    assert [step for step, _ in history] == steps
    losses = [loss for _, loss in history]
    assert all(math.isfinite(loss) for loss in losses), losses
    assert losses[-1] < falls_by * losses[0], losses


def logged_steps(lines):
    """[(step, loss)] from a script's "step N loss X" lines."""
    logged = [re.fullmatch(r"step (\d+) loss ([0-9.]+)", line) for line in lines]
    return [(int(m.group(1)), float(m.group(2))) for m in logged if m]


def installed_main(module, function="main", *args):
    """In a cluster worker: install(), then the program's entry point, unchanged."""
    import compat_distribute

    compat_distribute.install()
    return getattr(importlib.import_module(module), function)(*args)


def on_two_workers(cluster, module, function="main", *args):
    """The program's histories on the two workers of `cluster` (conftest's `two_workers`)."""
    return cluster.run(installed_main, module, function, *args)


def test_bert_classifier_with_steps_per_loop_on_the_tpu(legacy_tpu):
    del legacy_tpu
    import bert_classifier_tpu

    with pytest.warns(DeprecationWarning) as caught:
        history = bert_classifier_tpu.main(tpu="grpc://127.0.0.1:8470")
    assert_trained(history, [4, 8, 12, 16, 20, 24])
    # Renamed members warn at the program's own lines, inside its tf.function too.
    assert {(w.filename, str(w.message).split(" ")[0]) for w in caught} == {
        (bert_classifier_tpu.__file__, "experimental_distribute_datasets_from_function"),
        (bert_classifier_tpu.__file__, "experimental_run_v2"),
    }


def test_tf1_tpu_mnist_graph_loop_with_a_session(run_legacy_script):
    lines = run_legacy_script("tpu_mnist_graph_loop.py", "--train_steps=24", "--steps_per_run=4")
    assert_trained(logged_steps(lines), [4, 8, 12, 16, 20, 24], falls_by=0.9)


@pytest.mark.multi_worker
def test_tf1_tpu_mnist_graph_loop_with_a_session_on_a_pod(run_legacy_script):
    # A v4-16: 2 host processes, the session's master on host 0, the cluster_def
    # from strategy.configure, as a TF1 program drove a Cloud TPU pod.
    lines = run_legacy_script(
        "tpu_mnist_graph_loop.py", "--train_steps=24", "--steps_per_run=4", topology="v4-16"
    )
    assert_trained(logged_steps(lines), [4, 8, 12, 16, 20, 24], falls_by=0.9)


def test_tf1_fit_loop_with_steps_per_run_in_a_variable(run_legacy_script):
    history = logged_steps(run_legacy_script("tpu_fit_loop_variable_steps.py"))
    # 10 steps per epoch in runs of 4, 4 and 2 (the variable set to the rest).
    assert_trained(history, [4, 8, 10, 14, 18, 20], falls_by=0.5)


def test_model_training_utils_loop_on_two_workers(two_workers):
    histories = on_two_workers(two_workers, "training_utils_loop")
    for history in histories:
        assert_trained(history, [4, 8, 12, 16])
    assert histories[0] == histories[1]  # synchronous: both workers saw the same losses


def test_eager_mnist_custom_training_on_two_workers(two_workers):
    histories = on_two_workers(two_workers, "eager_mnist_custom_training")
    # 256 examples in global batches of 2 x 16: 8 steps per epoch, 3 epochs.
    for history in histories:
        assert_trained(history, [8, 16, 24])
    assert histories[0] == histories[1]


def test_distribution_utils_tpu_flag_on_the_tpu(legacy_tpu):
    del legacy_tpu
    import distribution_utils_flags

    with pytest.warns(DeprecationWarning, match="experimental_run_v2 is deprecated") as caught:
        history = distribution_utils_flags.train_with_flags(
            {"distribution_strategy": "tpu", "tpu": "my-tpu"}
        )
    assert {w.filename for w in caught} == {distribution_utils_flags.__file__}
    assert_trained(history, list(range(1, 13)), falls_by=0.5)


def test_distribution_utils_multi_worker_flag_on_two_workers(two_workers):
    histories = on_two_workers(
        two_workers,
        "distribution_utils_flags",
        "train_with_flags",
        {"distribution_strategy": "multi_worker_mirrored", "all_reduce_alg": "ring"},
    )
    for history in histories:
        assert_trained(history, list(range(1, 13)), falls_by=0.5)
    assert histories[0] == histories[1]


def test_distribution_utils_rejects_an_unknown_all_reduce_alg():
    import distribution_utils_flags

    with pytest.raises(ValueError, match="valid values for all_reduce_alg are"):
        distribution_utils_flags._collective_communication("hierarchical_copy")  # pylint: disable=protected-access
