"""Outside compilation in a fake TPU step: on the host, and per shard when mapped.

On a TPU, `tpu_replication.experimental_map_outside_compilation(f, x)` runs `f`
on each logical core's shard of `x` (split with
`experimental_split_to_logical_devices`) and the results are the output's
shards. Outside a TPU replicate context TensorFlow runs `f` once on the whole
tensor, which differs for any `f` that is not elementwise (a shard's mean). In a
fake TPU step the fake splits `x` by its annotation, runs `f` on each shard and
puts the results back together. `tf.tpu.outside_compilation(f, ...)` runs `f`
in place, as the host would, without TensorFlow's "no TPU context" warning.
Both apply while a fake strategy's `run` runs (`in_steps`).
"""

import contextlib
import threading

import numpy as np
import tensorflow as tf

from compat_distribute import _patching
from compat_distribute.testing import _tf

_IMPL = "outside_compilation_impl"
_lock = threading.Lock()
_depth = 0  # runs in progress, in every thread
_patch = None


def _in_fake_replica():
    from compat_distribute.testing._fake_tpu import extended  # pylint: disable=g-import-not-at-top

    context = tf.distribute.get_replica_context()  # None in cross-replica context
    return context is not None and isinstance(context.strategy.extended, extended.FakeTPUExtended)


def _outside_compilation_impl(is_map, computation, *args, **kwargs):
    if not (tf.inside_function() and _in_fake_replica()):
        original = _patching.original(_tf.tpu_replication, _IMPL)
        return original(is_map, computation, *args, **kwargs)
    if not is_map:
        return computation(*args, **kwargs)
    return map_per_shard(computation, args, kwargs)


@contextlib.contextmanager
def in_steps():
    """Routes TensorFlow's outside compilation to the fake while entered (re-entrant, any thread)."""
    global _depth, _patch
    with _lock:
        if _depth == 0:
            _patch = _patching.Patch([(_tf.tpu_replication, _IMPL, _outside_compilation_impl)])
            _patch.start()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _patch.stop()
                _patch = None


def _tiles(tensor):
    """How `tensor` is split over logical cores: shards per dimension, or None if unsplit."""
    shape = _tf.get_sharding_tile_shape(_tf.get_tensor_sharding(tensor))
    if not shape or int(np.prod(shape)) <= 1:
        return None
    return tuple(int(k) for k in shape)


def _split(tensor, tiles):
    """`tensor`'s shards in the order of the tile assignment (row-major over `tiles`)."""
    pieces = [tensor]
    for axis, count in enumerate(tiles):
        if count > 1:
            pieces = [p for piece in pieces for p in tf.split(piece, count, axis)]
    return pieces


def _join(pieces, tiles, index):
    """The inverse of `_split` for the shards' output number `index`."""
    if not tf.is_tensor(pieces[0]):
        return pieces[0]
    if pieces[0].shape.rank is not None and pieces[0].shape.rank < len(tiles):
        raise ValueError(
            f"experimental_map_outside_compilation: output {index} of the computation has "
            f"shape {pieces[0].shape} on each shard, of rank below the input's split "
            f"({list(tiles)} shards per dimension). On a TPU the shards' outputs are the "
            f"output's shards along the split dimensions; return a tensor that keeps them."
        )
    for axis in reversed(range(len(tiles))):
        count = tiles[axis]
        if count > 1:
            pieces = [tf.concat(pieces[i : i + count], axis) for i in range(0, len(pieces), count)]
    return pieces[0]


def map_per_shard(computation, args, kwargs):
    """`computation` on each shard of its split inputs (unsplit ones whole), the
    results put back together as the TPU's output shards are."""
    flat = tf.nest.flatten((args, kwargs))
    tilings = {i: _tiles(leaf) for i, leaf in enumerate(flat) if tf.is_tensor(leaf)}
    split = {i: tiles for i, tiles in tilings.items() if tiles is not None}
    if not split:
        raise ValueError(
            "experimental_map_outside_compilation maps its computation onto the shards of "
            "an input split over logical cores; none of these inputs is split. On the fake "
            "TPU, pass the output of strategy.experimental_split_to_logical_devices itself "
            "(ops in between drop its split); use tf.tpu.outside_compilation for unsplit "
            "inputs."
        )
    kinds = set(split.values())
    if len(kinds) > 1:
        raise ValueError(
            f"experimental_map_outside_compilation: the inputs are split differently "
            f"({sorted(kinds)} shards per dimension); a TPU maps the computation onto one "
            f"split. Split every mapped input with the same partition_dimensions."
        )
    tiles = kinds.pop()
    shards = {i: _split(flat[i], tiles) for i in split}
    outputs = []
    for s in range(int(np.prod(tiles))):
        leaves = [shards[i][s] if i in shards else leaf for i, leaf in enumerate(flat)]
        shard_args, shard_kwargs = tf.nest.pack_sequence_as((args, kwargs), leaves)
        outputs.append(computation(*shard_args, **shard_kwargs))
    per_leaf = zip(*(tf.nest.flatten(o) for o in outputs))
    joined = [_join(list(pieces), tiles, i) for i, pieces in enumerate(per_leaf)]
    return tf.nest.pack_sequence_as(outputs[0], joined)
