"""A public Keras-on-TPU-pod program, its distribution code as written, on a fake v3-32 pod.

The program (`keras_flowers_tpu_pod_fit.py`, which names its source) runs as the corpus
runs (see test_public_programs.py), with Keras 3 as `tf.keras`: 32 replicas on 4 host
processes, `fit` with a validation set of TFRecord files read to their end each epoch.
"""

import re

import pytest
from test_public_programs import assert_falls

# The pod's 4 hosts start and trace the step once; a loaded machine needs the time.
TIMEOUT_S = 600

EPOCH_LINE = re.compile(r"epoch (\d+) loss ([0-9.]+) val_loss ([0-9.]+) val_accuracy ([0-9.]+)")


@pytest.mark.multi_worker
def test_keras_flowers_fit_with_validation_on_a_v3_32_pod_runs_to_its_end(run_legacy_script):
    lines = run_legacy_script(
        "keras_flowers_tpu_pod_fit.py", topology="v3-32", timeout=TIMEOUT_S
    )
    workers = re.fullmatch(r"Running on TPU  \[(.*)\]", lines[0]).group(1).split(", ")
    assert len(workers) == 4 and all(w.startswith("'127.0.0.1:") for w in workers)
    # The pod branch of the notebook's configuration: 16 images a core, 32 cores.
    assert lines[1:4] == [
        "REPLICAS:  32",
        "TRAINING   IMAGES:  3264 , STEPS PER EPOCH:  6",
        "VALIDATION IMAGES:  576 , STEPS PER EPOCH:  2",
    ]
    epochs = [EPOCH_LINE.fullmatch(line) for line in lines[4:]]
    assert [int(m.group(1)) for m in epochs] == [1, 2, 3, 4]
    assert_falls([float(m.group(2)) for m in epochs], by=0.9)
    for m in epochs:
        # Each validation pass read all 576 images, its last batch (64 of 256) included,
        # and ended at the end of its files: the accuracy counts whole images of 576.
        correct = float(m.group(4)) * 576
        assert abs(correct - round(correct)) < 1e-3, m.group(0)
