"""Checkpoints lose nothing across strategies, interrupted saves and workers.

Model variables and Adam's slots saved with `tf.train.Checkpoint` under the
fake TPU (8 replicas) restore bit for bit under a 2-replica MirroredStrategy,
no strategy and the MultiWorkerMirroredStrategy shim, and back. A save killed
part-way leaves the previous checkpoint readable. With two workers only the
chief writes the checkpoint directory.
"""

import contextlib
import os
import signal

import numpy as np
import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute import checkpoint as cd_checkpoint
from compat_distribute.testing import cluster
from compat_distribute import testing

keras = pytest.importorskip("keras")


def make_state(strategy, seed):
    """A built model and Adam optimizer (slots created), in `strategy`'s scope."""
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        model = keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(8, kernel_initializer=keras.initializers.GlorotUniform(seed)),
                keras.layers.Dense(
                    1, kernel_initializer=keras.initializers.GlorotUniform(seed + 1)
                ),
            ]
        )
        optimizer = keras.optimizers.Adam(0.01)
        optimizer.build(model.trainable_variables)
    return model, optimizer


# An optimizer variable's role, from its Keras 3 path ("adam/dense_kernel_momentum")
# or its Keras 2 name ("m/dense/kernel:0", "iteration:0").
_KERAS_2_ROLES = {"m": "momentum", "v": "velocity", "iteration:0": "iteration"}


def _optimizer_role(variable):
    if hasattr(variable, "path"):  # Keras 3
        roles = ("momentum", "velocity", "iteration")
        return next((r for r in roles if r in variable.path), "other")
    return _KERAS_2_ROLES.get(variable.name.split("/")[0], "other")


def snapshot(model, optimizer):
    """Role -> numpy value of every variable the checkpoint holds.

    Keyed by position and role (names carry per-model suffixes such as
    "sequential_1"), e.g. "model/0" or "optimizer/3/momentum".
    """
    out = {f"model/{i}": v.numpy() for i, v in enumerate(model.weights)}
    for i, v in enumerate(optimizer.variables):
        role = _optimizer_role(v)
        out[f"optimizer/{i}/{role}"] = v.numpy()
    return out


def assert_bit_identical(got, want):
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        assert got[name].shape == want[name].shape, name
        assert got[name].tobytes() == want[name].tobytes(), name


@pytest.fixture(scope="module", name="fake_tpu_strategy")
def fake_tpu_strategy_fixture():
    return compat_distribute.TPUStrategy(testing.FakeTPUClusterResolver("v3-8"))


@pytest.fixture(scope="module", name="saved_on_fake_tpu")
def saved_on_fake_tpu_fixture(fake_tpu_strategy, tmp_path_factory):
    """A checkpoint of a model trained for a few steps on the fake TPU."""
    model, optimizer = make_state(fake_tpu_strategy, seed=1)
    with fake_tpu_strategy.scope():
        model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.RandomState(0)
    x = rng.randn(64, 4).astype("float32")
    model.fit(x, x.sum(axis=1, keepdims=True), batch_size=16, epochs=1, verbose=0)
    values = snapshot(model, optimizer)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).save(
        str(tmp_path_factory.mktemp("fake_tpu") / "ckpt")
    )
    return path, values


STRATEGIES = {
    "mirrored_2": lambda: tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]),
    "no_strategy": lambda: None,
    "multi_worker_shim": compat_distribute.MultiWorkerMirroredStrategy,
}


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_fake_tpu_checkpoint_restores_bit_identically_and_back(
    name, saved_on_fake_tpu, fake_tpu_strategy, tmp_path
):
    path, saved = saved_on_fake_tpu
    strategy = STRATEGIES[name]()
    assert fake_tpu_strategy.num_replicas_in_sync == 8
    if strategy is not None and name == "mirrored_2":
        assert strategy.num_replicas_in_sync == 2

    model, optimizer = make_state(strategy, seed=7)
    before = snapshot(model, optimizer)
    # Slots were trained (Adam's moments are non-zero): they carry information.
    assert any(np.any(v != 0) for k, v in saved.items() if "momentum" in k)
    assert any(not np.array_equal(before[k], saved[k]) for k in saved)
    tf.train.Checkpoint(model=model, optimizer=optimizer).restore(path).assert_consumed()
    assert_bit_identical(snapshot(model, optimizer), saved)

    # And back: saved under this strategy, restored on the fake TPU.
    back = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "back"))
    model_tpu, optimizer_tpu = make_state(fake_tpu_strategy, seed=11)
    tf.train.Checkpoint(model=model_tpu, optimizer=optimizer_tpu).restore(back).assert_consumed()
    assert_bit_identical(snapshot(model_tpu, optimizer_tpu), saved)


# A process that saves checkpoint 1, then dies (SIGKILL) while saving checkpoint 2.
_INTERRUPTED_SAVE = """
import os, signal, sys
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management
from tensorflow.python.ops import gen_io_ops

directory, where = sys.argv[1], sys.argv[2]
weights = tf.Variable(tf.fill([512, 512], 1.5))
step = tf.Variable(1, dtype=tf.int64)
manager = tf.train.CheckpointManager(
    tf.train.Checkpoint(weights=weights, step=step), directory, max_to_keep=5)
manager.save()
weights.assign(tf.fill([512, 512], -2.5))
step.assign(2)

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if where == "after_shards":  # the tensors are written, the index is not
    gen_io_ops.merge_v2_checkpoints = die
else:  # all files written, the "checkpoint" state file not updated
    checkpoint_management.update_checkpoint_state_internal = die
manager.save()
print("not killed")
"""


@pytest.mark.parametrize("where", ["after_shards", "before_state_file"])
def test_killed_save_leaves_the_last_complete_checkpoint(where, tmp_path, run_python):
    directory = str(tmp_path)
    result = run_python(
        _INTERRUPTED_SAVE.replace("sys.argv[1], sys.argv[2]", f"{directory!r}, {where!r}")
    )
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert "not killed" not in result.stdout
    files = sorted(os.listdir(directory))
    if where == "after_shards":
        # Checkpoint 2's tensors were written to its temporary directory.
        assert "ckpt-2_temp" in files
        assert "ckpt-2.index" not in files
    else:
        assert "ckpt-2.index" in files
    assert tf.train.latest_checkpoint(directory) == os.path.join(directory, "ckpt-1")

    weights = tf.Variable(tf.zeros([512, 512]))
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(weights=weights, step=step)
    checkpoint.restore(tf.train.latest_checkpoint(directory)).assert_consumed()
    assert int(step.numpy()) == 1
    assert weights.numpy().tobytes() == np.full([512, 512], 1.5, np.float32).tobytes()


def test_checkpoint_dir_is_the_path_without_workers(tmp_path):
    strategy = compat_distribute.MultiWorkerMirroredStrategy()
    assert cd_checkpoint.is_chief(strategy)
    assert cd_checkpoint.checkpoint_dir_for(strategy, tmp_path) == str(tmp_path)
    assert cd_checkpoint.checkpoint_dir_for(tf.distribute.get_strategy(), "x") == "x"
    with cd_checkpoint.checkpoint_dir(strategy, str(tmp_path)) as directory:
        assert directory == str(tmp_path)
    assert tmp_path.is_dir()  # the real path is never deleted


PATH_ACCEPTED = (
    "path must be a directory name (a non-empty str or os.PathLike); got {}. Pass the "
    "checkpoint directory, e.g. '/tmp/ckpts/run1'; on workers other than the chief a "
    "temporary directory is returned instead."
)
NOT_A_STRATEGY = (
    "strategy must be a tf.distribute.Strategy (for example "
    "compat_distribute.TPUStrategy(...), or tf.distribute.get_strategy() outside any "
    "strategy's scope); got {}. Pass the strategy that saves the checkpoint."
)


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda s, p: cd_checkpoint.checkpoint_dir_for(None, p), TypeError,
         NOT_A_STRATEGY.format("None (NoneType)")),
        (lambda s, p: cd_checkpoint.checkpoint_dir_for("worker", p), TypeError,
         NOT_A_STRATEGY.format("'worker' (str)")),
        (lambda s, p: cd_checkpoint.is_chief(None), TypeError,
         NOT_A_STRATEGY.format("None (NoneType)")),
        (lambda s, p: cd_checkpoint.checkpoint_dir_for(s, 3), TypeError,
         PATH_ACCEPTED.format("3 (int)")),
        (lambda s, p: cd_checkpoint.checkpoint_dir_for(s, None), TypeError,
         PATH_ACCEPTED.format("None (NoneType)")),
        (lambda s, p: cd_checkpoint.checkpoint_dir_for(s, ""), ValueError,
         PATH_ACCEPTED.format("'' (str)")),
    ],
    ids=["strategy-none", "strategy-str", "is-chief-none", "path-int", "path-none", "path-empty"],
)
def test_bad_arguments_are_named(call, error, text, tmp_path):
    strategy = compat_distribute.MultiWorkerMirroredStrategy()
    with pytest.raises(error) as raised:
        call(strategy, tmp_path)
    assert str(raised.value) == text


def save_in_worker(path):
    """Runs in each worker: every worker saves, only the chief into `path`."""
    strategy = cluster.worker_strategy(compat_distribute.MultiWorkerMirroredStrategy)
    with strategy.scope():
        weights = tf.Variable(tf.fill([64, 64], 0.25))
        step = tf.Variable(42, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(weights=weights, step=step)
    with cd_checkpoint.checkpoint_dir(strategy, path) as directory:
        manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1)
        saved = manager.save()
        written = sorted(os.listdir(directory))
    return {
        "task": cluster.current_task(),
        "chief": cd_checkpoint.is_chief(strategy),
        "directory": directory,
        "saved": saved,
        "written": written,
        "still_there": os.path.exists(directory),
    }


@pytest.mark.multi_worker
def test_only_the_chief_writes_the_checkpoint_path(tmp_path):
    path = str(tmp_path / "ckpts")
    with cluster.local_cluster(num_workers=2, timeout=120) as workers:
        chief, other = workers.run(save_in_worker, path)
    assert chief["task"] == ("worker", 0) and chief["chief"]
    assert other["task"] == ("worker", 1) and not other["chief"]
    assert chief["directory"] == path
    assert chief["saved"] == os.path.join(path, "ckpt-1")
    assert other["directory"] != path and not other["directory"].startswith(path)
    assert other["written"] == chief["written"]  # the worker did save, elsewhere
    assert not other["still_there"]  # and its temporary directory is gone
    assert sorted(os.listdir(path)) == ["checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index"]

    weights = tf.Variable(tf.zeros([64, 64]))
    step = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(weights=weights, step=step).restore(
        tf.train.latest_checkpoint(path)
    ).assert_consumed()
    assert int(step.numpy()) == 42
    assert weights.numpy().tobytes() == np.full([64, 64], 0.25, np.float32).tobytes()
