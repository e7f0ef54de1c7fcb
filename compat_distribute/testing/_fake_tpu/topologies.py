"""TPU slices as data: the presets, and the checks on a custom mesh.

A pod is a row, not code. Imports no TensorFlow.
"""

import dataclasses
import itertools
import types

import numpy as np

from compat_distribute.testing import devices

@dataclasses.dataclass(frozen=True)
class Preset:
    """One TPU slice: its accelerator type and how its cores are laid out."""

    name: str  # the accelerator type, as Cloud TPU names it
    mesh_shape: tuple  # (x, y, z, cores_per_chip)
    hosts: int = 1

    @property
    def chips(self):
        x, y, z, _ = self.mesh_shape
        return x * y * z

    @property
    def cores(self):
        return self.chips * self.mesh_shape[3]

    @property
    def cores_per_host(self):
        return self.cores // self.hosts


# The table of slices. A new preset is one row here: the resolver, `fake_tpu()`,
# the chooser, the pytest plugin's options and `compat-distribute smoke
# --topology` all read PRESETS (a read-only view of it) when asked.
_TABLE = {
    row.name: row
    for row in (
        Preset("v2-8", (2, 2, 1, 2)),  # 4 chips x 2 TensorCores
        Preset("v3-8", (2, 2, 1, 2)),  # 4 chips x 2 TensorCores
        Preset("v4-8", (2, 2, 1, 1)),  # 4 megacore chips (2x2x1)
        Preset("v5litepod-1", (1, 1, 1, 1)),  # v5e, 1 chip
        Preset("v5litepod-4", (2, 2, 1, 1)),  # v5e, 4 chips (2x2)
        Preset("v5litepod-8", (2, 4, 1, 1)),  # v5e, 8 chips (2x4), one host
        Preset("v5p-8", (2, 2, 1, 1)),  # 4 megacore chips (2x2x1): the name counts TensorCores
        Preset("v6e-1", (1, 1, 1, 1)),  # Trillium, 1 chip
        Preset("v6e-4", (2, 2, 1, 1)),  # Trillium, 4 chips (2x2)
        Preset("v6e-8", (2, 4, 1, 1)),  # Trillium, 8 chips (2x4), one host
        # Pods: several hosts of 4 chips each (a v5e / v6e host of a multi-host
        # slice drives 4 chips, as a v2 / v3 / v4 / v5p host always does).
        Preset("v2-32", (4, 4, 1, 2), hosts=4),  # 16 chips x 2 TensorCores, 8 cores a host
        Preset("v3-32", (4, 4, 1, 2), hosts=4),  # 16 chips x 2 TensorCores, 8 cores a host
        Preset("v4-16", (2, 2, 2, 1), hosts=2),  # 8 megacore chips (2x2x2)
        Preset("v4-32", (2, 2, 4, 1), hosts=4),  # 16 megacore chips (2x2x4)
        Preset("v5p-16", (2, 2, 2, 1), hosts=2),  # 8 megacore chips (2x2x2)
        Preset("v5litepod-16", (4, 4, 1, 1), hosts=4),  # v5e, 16 chips (4x4)
        Preset("v5litepod-32", (4, 8, 1, 1), hosts=8),  # v5e, 32 chips (4x8)
        Preset("v6e-16", (4, 4, 1, 1), hosts=4),  # Trillium, 16 chips (4x4)
        Preset("v6e-32", (4, 8, 1, 1), hosts=8),  # Trillium, 32 chips (4x8)
    )
}
PRESETS = types.MappingProxyType(_TABLE)

# Cores TensorFlow sees on one chip, over the TPU generations (see the module docstring).
CORES_PER_CHIP = (1, 2)

# The one default, applied by `preset_name` alone: every `topology=None` of the
# fake, the chooser and the smoke command means it.
DEFAULT_TOPOLOGY = "v3-8"

def one_host_meshes():
    """{preset name: mesh shape} of the one-host presets, read from the table now."""
    return {name: p.mesh_shape for name, p in PRESETS.items() if p.hosts == 1}


# A host of a pod holds this block of chips (x, y, z): 4 chips.
HOST_CHIPS = (2, 2, 1)


def preset_name(topology):
    """`topology`, or the default preset's name for None."""
    return DEFAULT_TOPOLOGY if topology is None else topology


def _spelled_like(topology):
    """The preset `topology` names in another spelling ("V3-8", "v3_8", "v5e-8"), or None."""
    name = topology.strip().lower().replace("_", "-")
    if name.startswith("v5e-"):  # Cloud TPU's accelerator type for v5e is v5litepod-N
        name = "v5litepod-" + name[len("v5e-"):]
    return name if name in PRESETS else None


def resolve(topology, mesh_shape):
    """`(name, mesh)` for the constructor arguments (`topology` None: the default
    preset, or the mesh's own name); raises before any state changes."""
    if mesh_shape is None:
        topology = preset_name(topology)
        presets = ", ".join(repr(t) for t in PRESETS)
        if not isinstance(topology, str):
            raise TypeError(
                f"topology must be a preset name (one of {presets}); got "
                f"{topology!r} ({type(topology).__name__}). Pass mesh_shape=(x, y, z, "
                f"cores_per_chip) for another mesh."
            )
        if topology not in PRESETS:
            close = _spelled_like(topology)
            raise ValueError(
                f"Unknown TPU topology {topology!r}"
                + ("" if close is None else f" (did you mean {close!r}?)")
                + f"; the presets are {presets}. Pass mesh_shape=(x, y, z, "
                f"cores_per_chip) for another mesh."
            )
        return topology, PRESETS[topology].mesh_shape
    if topology is not None:
        raise ValueError(
            f"Pass either topology= or mesh_shape=, not both; got topology={topology!r} "
            f"and mesh_shape={mesh_shape!r}."
        )
    try:
        mesh = tuple(mesh_shape)
    except TypeError:
        mesh = None
    if (
        mesh is None
        or len(mesh) != 4
        or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in mesh)
    ):
        raise ValueError(
            f"mesh_shape must be four positive ints (x, y, z, cores_per_chip); got "
            f"{mesh_shape!r}. For example mesh_shape=(2, 2, 1, 2) is a v3-8 (8 cores)."
        )
    mesh = tuple(int(v) for v in mesh)
    if mesh[3] not in CORES_PER_CHIP:
        raise ValueError(
            f"mesh_shape's cores_per_chip (its 4th value) must be 1 or 2: TensorFlow sees 2 "
            f"cores on a v2 or v3 chip and 1 on a v4, v5e, v5p or v6e chip; got {mesh[3]} in "
            f"mesh_shape={mesh_shape!r}. Pass (x, y, z, 2) for v2/v3-like chips or "
            f"(x, y, z, 1) for later ones, e.g. mesh_shape=(2, 2, 1, 2), a v3-8."
        )
    # Each core is a virtual device: the one device limit applies.
    devices.check_count(
        f"mesh_shape {mesh}'s core count", int(np.prod(mesh, dtype=object)),
        fix=" Use a smaller mesh.",
    )
    return "mesh" + "x".join(str(v) for v in mesh), mesh


def device_coordinates(mesh, hosts=1):
    """Physical coordinates [host][core] of the cores, cores of a chip adjacent.

    One host holds the whole mesh; the hosts of a pod hold `HOST_CHIPS` blocks,
    x first, then y, then z (the task order of a TPU pod's topology).
    """
    x_size, y_size, z_size, c_size = mesh
    block = (x_size, y_size, z_size) if hosts == 1 else HOST_CHIPS
    starts = [
        (x, y, z)
        for z, y, x in itertools.product(
            range(0, z_size, block[2]), range(0, y_size, block[1]), range(0, x_size, block[0])
        )
    ]
    if len(starts) != hosts:
        raise ValueError(f"mesh {mesh} does not split into {hosts} hosts of {HOST_CHIPS} chips.")
    return np.array(
        [
            [
                (x0 + x, y0 + y, z0 + z, c)
                for z, y, x, c in itertools.product(
                    range(block[2]), range(block[1]), range(block[0]), range(c_size)
                )
            ]
            for x0, y0, z0 in starts
        ],
        dtype=np.int32,
    )


def pod_names():
    """The presets of several hosts."""
    return tuple(name for name, preset in PRESETS.items() if preset.hosts > 1)


def host_count(name, hosts):
    """How many host processes the slice `name` (None: the default preset) runs on
    for `hosts=` (None: its own)."""
    name = preset_name(name)
    own = PRESETS[name].hosts if name in PRESETS else 1
    if hosts is None:
        return own
    accepted = "1" if own == 1 else f"1 (every core in this process) or {own} (its hosts)"
    if isinstance(hosts, bool) or not isinstance(hosts, (int, np.integer)):
        choices = "hosts=1" if own == 1 else f"hosts={own} (its hosts) or hosts=1 (one process)"
        raise TypeError(
            f"hosts must be an int or None, not a {type(hosts).__name__}; got {hosts!r}. "
            f"For the TPU slice {name!r} pass {choices}, or leave hosts out for the "
            f"slice's own hosts."
        )
    hosts = int(hosts)
    if hosts not in (1, own):
        raise ValueError(
            f"hosts must be None or {accepted} for the TPU slice {name!r}; got {hosts!r}. "
            f"A slice has the hosts of its preset: pick a pod preset ({', '.join(pod_names())}) "
            f"for several hosts."
        )
    return hosts
