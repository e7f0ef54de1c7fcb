"""Public TF 1.12-2.3 programs, their distribution code as written, after `install()`.

Each program beside this file names its source (repository, path, commit) in its
docstring and keeps that source's distribution lines unchanged; only the data
(small and synthetic), the step counts and `compat_distribute.install()` at the
top differ. They run as the corpus runs (`test_corpus.py`): on the fake TPU in a
fresh process, or on a 2-worker local cluster. Each must train (its logged
steps, a falling loss), show the replica count its hardware gives, and end.
"""

import math
import re

import numpy as np
from test_corpus import on_two_workers

TF_KERAS = {"TF_USE_LEGACY_KERAS": "1"}  # tf.keras is tf-keras, which has TF1's graph mode
KERAS_MNIST_CONTRIB = ("tpu_mnist_keras_contrib.py", "--tpu=grpc://127.0.0.1:8470")
COLAB_TPU = {"COLAB_TPU_ADDR": "127.0.0.1:8470"}  # a Colab TPU runtime, on loopback


def epoch_losses(lines):
    """[(epoch, loss)] from a program's "epoch N loss X" lines."""
    logged = [re.fullmatch(r"epoch (\d+) loss ([0-9.]+)", line) for line in lines]
    return [(int(m.group(1)), float(m.group(2))) for m in logged if m]


def assert_falls(losses, *, by=0.8):
    assert all(math.isfinite(loss) for loss in losses), losses
    assert losses[-1] < by * losses[0], losses


def test_tf21_colab_tpu_detection_and_keras_fit(run_legacy_script):
    # Point 3: TPUClusterResolver() finds the Colab TPU from COLAB_TPU_ADDR, its
    # cluster_spec has a worker job, and connect/initialize name its grpc:// master,
    # all served locally. Point 1: after fit, the process ends within the bound.
    lines = run_legacy_script(
        "colab_flowers_tpu_detection.py", topology="v3-8", env=COLAB_TPU, exit_normally=True
    )
    assert lines[:2] == ["Running on TPU  ['127.0.0.1:8470']", "REPLICAS:  8"]
    history = epoch_losses(lines)
    assert [epoch for epoch, _ in history] == [1, 2, 3, 4]
    assert_falls([loss for _, loss in history])


def test_tf1_keras_mnist_example_with_contrib_imports_and_steps_per_run(run_legacy_script):
    # Point 5: `from tensorflow.contrib import ...` and the contrib TPUStrategy with
    # steps_per_run. Point 4: tf-keras' TF1 graph-mode fit cannot run 100 steps per
    # call, and says so once.
    lines, stderr = run_legacy_script(
        *KERAS_MNIST_CONTRIB, env=TF_KERAS, with_stderr=True, topology="v3-8"
    )
    history = epoch_losses(lines)
    assert [epoch for epoch, _ in history] == [1, 2, 3]
    assert_falls([loss for _, loss in history], by=0.9)
    assert re.fullmatch(r"Loss for final step: [0-9.]+;", lines[-2])
    assert re.fullmatch(r"Accuracy: [0-9.]+;", lines[-1])
    said = [line for line in stderr.splitlines() if "steps_per_run=100 is not used" in line]
    assert len(said) == 1, stderr[-3000:]
    assert "tpu_mnist_keras_contrib.py" in said[0]
    assert "FakeTPUStrategy: it runs one step per call" in said[0]


def test_tf1_contrib_tpu_example_session_on_the_resolver_master(run_legacy_script):
    # Point 2: the program's own ConfigProto has no soft placement and it never
    # calls strategy.configure; the session on the grpc:// master must still see
    # all 8 cores, or the first run fails to place replica 1. Points 3 and 5: the
    # resolver from a Cloud TPU address, tf.contrib.distribute on tf.compat.v1.
    # Point 1: each epoch re-initialises the per-replica iterators, and the
    # session closes.
    lines = run_legacy_script(
        "mnist_tf1_tpu_session.py", "--tpu=grpc://127.0.0.1:8470", "--num_epochs=3",
        topology="v3-8", env=TF_KERAS,
    )
    assert [line for line in lines if line.startswith("Starting epoch")] == [
        "Starting epoch 0", "Starting epoch 1", "Starting epoch 2"
    ]
    for kind in ("Training", "Test"):
        logged = [re.fullmatch(kind + r" loss: ([0-9.]+), accuracy: ([0-9.]+)%", line)
                  for line in lines]
        losses = [float(m.group(1)) for m in logged if m]
        assert len(losses) == 3, lines
        assert_falls(losses)


def test_multi_worker_keras_tutorial_on_two_workers(two_workers):
    # TF_CONFIG, the TF 2.0 spelling routed to the multi-worker shim, and Keras fit
    # on a finite dataset: 1024 examples in global batches of 128, 3 epochs.
    results = on_two_workers(two_workers, "multi_worker_keras_tutorial")
    for replicas, steps, losses in results:
        assert replicas == 2
        assert steps == 3 * 8
        assert len(losses) == 3
        assert_falls(losses)
    np.testing.assert_allclose(results[0][2], results[1][2], rtol=1e-6)  # synchronous


def test_tf1_colab_custom_training_loop_in_a_soft_placed_session(run_legacy_script):
    # Points 2 and 3: a session on the master of a resolver built from
    # 'grpc://' + COLAB_TPU_ADDR, with the program's soft placement; `.values` of
    # experimental_run holds one loss per core. Point 5: tf.contrib throughout.
    lines = run_legacy_script(
        "colab_custom_training_session.py", topology="v3-8", env=COLAB_TPU | TF_KERAS
    )
    assert lines[0] == "Starting training..."
    for kind in ("Train", "Test"):
        logged = [re.fullmatch(f"{kind} loss: ([0-9.]+)\t {kind} accuracy: ([0-9.]+)%", line)
                  for line in lines]
        losses = [float(m.group(1)) for m in logged if m]
        accuracies = [float(m.group(2)) for m in logged if m]
        assert len(losses) == 3, lines
        # The notebook's model ends in a softmax and its loss applies another, so
        # the loss cannot fall far (its floor is above 0.74); it must still fall
        # each epoch while the accuracy climbs.
        assert losses[0] > losses[1] > losses[2], lines
        assert accuracies[-1] > 90.0, lines


def test_tf1_14_fashion_mnist_colab_fits_eagerly_on_tensorflow_2(run_legacy_script):
    # Points 3 and 5: the tf.contrib resolver from 'grpc://' + COLAB_TPU_ADDR,
    # initialize_tpu_system and TPUStrategy; Keras 3's eager fit on all 8 cores.
    # Point 1: after fit (validation included) the process ends within the bound.
    lines = run_legacy_script(
        "colab_fashion_mnist_contrib.py", topology="v3-8", env=COLAB_TPU, exit_normally=True
    )
    history = epoch_losses(lines)
    assert [epoch for epoch, _ in history] == [1, 2, 3]
    assert_falls([loss for _, loss in history])
    assert re.fullmatch(r"validation loss [0-9.]+", lines[-2])
    assert lines[-1] == "replicas 8"
