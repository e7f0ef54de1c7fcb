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

import pytest

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
