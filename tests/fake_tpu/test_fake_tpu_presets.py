"""Today's TPUs as presets: each builds a topology and a device assignment and runs a step."""

import pytest
import tensorflow as tf
from support.steps import replica_ids_summed

from compat_distribute.testing import PRESETS
from compat_distribute.testing import FakeTPUClusterResolver
from compat_distribute.testing import FakeTPUStrategy
from compat_distribute.testing import initialize_tpu_system

# (accelerator type, chips, TensorFlow devices, mesh) from the Cloud TPU pages of
# each generation: v5e and v6e have one TensorCore a chip; v4 and v5p chips are
# one (megacore) device; v5p names count TensorCores, v5e/v6e names count chips.
TODAYS_TPUS = [
    ("v5litepod-1", 1, 1, (1, 1, 1, 1)),
    ("v5litepod-4", 4, 4, (2, 2, 1, 1)),
    ("v5litepod-8", 8, 8, (2, 4, 1, 1)),
    ("v5p-8", 4, 4, (2, 2, 1, 1)),
    ("v6e-1", 1, 1, (1, 1, 1, 1)),
    ("v6e-4", 4, 4, (2, 2, 1, 1)),
    ("v6e-8", 8, 8, (2, 4, 1, 1)),
]


@pytest.mark.parametrize("name, chips, cores, mesh", TODAYS_TPUS, ids=[t[0] for t in TODAYS_TPUS])
def test_preset_builds_a_topology_a_device_assignment_and_runs_a_step(name, chips, cores, mesh):
    preset = PRESETS[name]
    assert (preset.chips, preset.cores, preset.mesh_shape, preset.hosts) == (chips, cores, mesh, 1)
    resolver = FakeTPUClusterResolver(name)
    assert resolver.num_accelerators() == {"TPU": cores}
    topology = initialize_tpu_system(resolver)
    assert topology.mesh_shape.tolist() == list(mesh)
    assert (topology.num_tasks, topology.num_tpus_per_task) == (1, cores)
    assignment = tf.tpu.experimental.DeviceAssignment.build(topology, num_replicas=cores)
    assert (assignment.num_replicas, assignment.num_cores_per_replica) == (cores, 1)
    strategy = FakeTPUStrategy(resolver, experimental_device_assignment=assignment)
    assert replica_ids_summed(strategy) == [sum(range(cores))] * cores


def test_every_preset_counts_its_cores():
    for name, preset in PRESETS.items():
        x, y, z, per_chip = preset.mesh_shape
        assert preset.cores == x * y * z * per_chip == preset.cores_per_host * preset.hosts, name


def test_a_mesh_past_the_core_limit_is_refused_before_any_device_is_made():
    with pytest.raises(ValueError, match=r"core count must be at most 256 .*; got 8192. Use a smaller mesh."):
        FakeTPUClusterResolver(mesh_shape=(16, 16, 16, 2))


def test_the_presets_and_the_default_import_no_tensorflow(run_python):
    result = run_python(
        """
        import sys
        from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY, PRESETS
        from compat_distribute.testing.pytest import options
        print(DEFAULT_TOPOLOGY, options.read().fake_tpu_topology, len(PRESETS))
        print(sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"))
        """,
        fresh=True,  # It asserts what a fresh interpreter has imported.
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == [f"v3-8 v3-8 {len(PRESETS)}", "[]"]
