"""Keras 3 and input on fake pods: the end of the data, and checkpoints between a
pod and one host. One client process runs both pod programs
(pod_keras_programs.py); the one-host side runs here, on this session's CPUs."""

import os

import numpy as np
import pod_helpers
import pod_keras_programs as programs
import pytest


def _client(name, *args):
    return pod_helpers.run_program("pod_keras_programs.py", name, *args)


@pytest.fixture(name="ends_run", scope="module")
def ends_run_fixture(pod_run):
    return pod_run["ends_of_data"]


@pytest.mark.multi_worker
def test_a_step_past_the_end_of_the_data_raises_out_of_range_at_its_call(ends_run):
    assert ends_run["cardinality"] == -2  # unknown, as for files
    # Two global batches of range(16) over 8 replicas, then the end.
    (first, second, end) = ends_run["steps"]
    assert first == ["value", sum(range(8))] and second == ["value", sum(range(8, 16))]
    assert end[0] == "OutOfRangeError"
    assert ends_run["optional_steps"] == [True, True, False]


@pytest.mark.multi_worker
def test_keras_evaluate_ends_at_the_end_of_tfrecord_files_with_every_examples_results(ends_run):
    # [loss, accuracy] of 256 examples in 4 batches of 64 over 8 replicas, twice,
    # against the model's own arithmetic on all 256. The call past the end runs
    # nothing, as on a TPU: on one device Keras 3 counts that call's 64 examples
    # in its metrics' totals (a count of 320), and MirroredStrategy some of them.
    for results in (ends_run["evaluate"], ends_run["evaluate_again"]):
        np.testing.assert_allclose(results, ends_run["expected"], rtol=1e-5)


@pytest.fixture(name="one_host", scope="module")
def one_host_fixture(tmp_path_factory):
    """A one-host fake v3-8 in this process: a checkpoint and a weights file after
    one epoch, and where one more epoch takes the model."""
    import tensorflow as tf

    import compat_distribute
    from compat_distribute.testing import FakeTPUClusterResolver

    directory = tmp_path_factory.mktemp("keras_checkpoints")
    strategy = compat_distribute.TPUStrategy(FakeTPUClusterResolver("v3-8"), steps_per_run=1)
    with strategy.scope():
        model = programs._regressor()  # pylint: disable=protected-access
    programs.fit_one_epoch(model)
    tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(
        os.path.join(directory, "one_host")
    )
    model.save_weights(os.path.join(directory, "one_host.weights.h5"))
    saved = programs.state(model)
    programs.fit_one_epoch(model)
    return {"strategy": strategy, "dir": str(directory), "saved": saved, "trained_on": programs.state(model)}


@pytest.fixture(name="pod_run", scope="module")
def pod_run_fixture(one_host):
    """One client: the checkpoints' pod (built without fake_tpu), then a pod under
    fake_tpu for the ends of data."""
    return _client("checkpoints_then_ends_of_data", one_host["dir"])


@pytest.fixture(name="checkpoints_run", scope="module")
def checkpoints_run_fixture(pod_run):
    return pod_run["checkpoints"]


def _assert_same_state(got, want):
    assert got["iterations"] == want["iterations"]
    for g, w in zip(got["weights"], want["weights"]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.multi_worker
def test_a_one_host_keras_checkpoint_restores_on_a_pod_built_without_fake_tpu(
    one_host, checkpoints_run
):
    assert checkpoints_run["replicas"] == [8, 2]
    _assert_same_state(checkpoints_run["restored"], one_host["saved"])
    # Adam's slots restored on the first step: the pod trains on as one host does.
    _assert_same_state(checkpoints_run["trained_on"], one_host["trained_on"])
    assert checkpoints_run["trained_on"]["iterations"] == 8


@pytest.mark.multi_worker
def test_a_one_host_weights_file_loads_on_a_pod(one_host, checkpoints_run):
    # A weights file holds the optimizer's variables too (Adam's 4 steps).
    _assert_same_state(checkpoints_run["loaded"], one_host["saved"])


@pytest.mark.multi_worker
def test_a_pods_keras_checkpoint_and_weights_file_restore_on_one_host(one_host, checkpoints_run):
    import tensorflow as tf

    with one_host["strategy"].scope():
        restored, loaded = programs._regressor(), programs._regressor()  # pylint: disable=protected-access
        for model in (restored, loaded):
            model.optimizer.build(model.trainable_variables)
    tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).restore(
        checkpoints_run["pod_checkpoint"]
    ).assert_consumed()
    _assert_same_state(programs.state(restored), checkpoints_run["trained_on"])
    loaded.load_weights(os.path.join(one_host["dir"], "pod.weights.h5"))
    _assert_same_state(programs.state(loaded), checkpoints_run["trained_on"])
