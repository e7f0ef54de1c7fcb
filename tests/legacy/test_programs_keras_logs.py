"""A public tf-keras program whose callbacks read the per-batch logs, on the fake TPU.

`keras_callbacks_guide_tpu.py` (the Keras callbacks guide of TF 2.2 with the TPU
guide's set-up) runs with `TF_USE_LEGACY_KERAS=1` on a fake v3-8 and on a one-core
fake: every loss its callbacks print, per batch and per epoch, must be the same.
tf-keras reports the first replica's value on a TPU; before the fake was taken for
one, each per-batch value was the sum over the 8 replicas.
"""

import re

import numpy as np

GUIDE = "keras_callbacks_guide_tpu.py"
ENV = {"TF_USE_LEGACY_KERAS": "1", "COLAB_TPU_ADDR": "127.0.0.1:8470"}
NUMBER = r"\s*(-?[0-9.]+)"
LINES = {
    "batch": re.compile(rf"For batch (\d+), loss is{NUMBER}\."),
    "epoch": re.compile(rf"The average loss for epoch (\d+) is{NUMBER} and mean absolute error is{NUMBER}\."),
}


def printed(lines):
    """(kind, numbers) of each line the guide's callbacks print, in order."""
    found = []
    for line in lines:
        for kind, pattern in LINES.items():
            match = pattern.fullmatch(line)
            if match:
                found.append((kind, [float(g) for g in match.groups()]))
    return found


def test_the_callbacks_guide_prints_one_devices_losses_on_a_v3_8(run_legacy_script):
    eight = run_legacy_script(GUIDE, topology="v3-8", env=ENV, timeout=300)
    one = run_legacy_script(GUIDE, topology="v5litepod-1", env=ENV, timeout=300)
    assert eight[0] == "replicas 8" and one[0] == "replicas 1"
    on_eight, on_one = printed(eight), printed(one)
    # fit: 8 batches x 2 epochs and 2 epoch lines; evaluate: 8 batches; the
    # early-stopped fit: 5 batches and one epoch line per epoch it ran.
    assert [kind for kind, _ in on_eight[:26]] == (["batch"] * 8 + ["epoch"]) * 2 + ["batch"] * 8
    assert [kind for kind, _ in on_eight] == [kind for kind, _ in on_one]
    for (_, got), (_, want) in zip(on_eight, on_one):
        assert got[0] == want[0]  # the batch or epoch index
        # Printed with 2 decimals: equal to rounding.
        np.testing.assert_allclose(got[1:], want[1:], rtol=1e-3, atol=0.011)
    assert len({numbers[1] for kind, numbers in on_eight if kind == "batch"}) > 10  # it trained
