"""The plugin's fixtures; `local_cluster` gives each test a running cluster of the
shape its `multi_worker` marker asks for, from a session pool (`_ClusterPool`)."""

import collections

import pytest

from compat_distribute.testing.pytest import markers
from compat_distribute.testing.pytest import session as session_state

STRATEGY_PARAMS = ("default", "mirrored", "tpu")


@pytest.fixture(autouse=True)
def _compat_distribute_multi_device(request):
    """Skips a multi_device(n) test that has fewer than n replicas."""
    if request.node.get_closest_marker("multi_device") is None:
        return
    needed = markers.count(request.node, "multi_device")
    if needed is None:
        pytest.fail(
            f"@pytest.mark.multi_device needs the number of replicas, e.g. "
            f"@pytest.mark.multi_device(2), in {request.node.nodeid}.",
            pytrace=False,
        )
    names = request.fixturenames
    if "strategy" in names:
        param = request.node.callspec.params["strategy"]
        have = request.getfixturevalue("strategy").num_replicas_in_sync
        what = f"strategy {param!r} has {have} replica(s)"
    elif "tpu_strategy" in names:
        have = request.getfixturevalue("tpu_strategy").num_replicas_in_sync
        what = f"tpu_strategy has {have} replica(s)"
    else:
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        have = len(tf.config.list_logical_devices("CPU"))
        what = f"there are {have} logical CPU device(s) (set more with --tf-devices)"
    if have < needed:
        pytest.skip(f"multi_device({needed}): needs {needed} replicas; {what}")


@pytest.fixture(scope="session")
def tpu_resolver(pytestconfig):
    """The resolver of the TPU chosen by --tpu: a real TPU's, or the fake's.

    A fake pod's hosts stop when the session ends.
    """
    resolver = session_state.of(pytestconfig).tpu().backend().make_resolver()
    yield resolver
    pod = getattr(resolver, "pod", None)
    if pod is not None:
        pod.stop()


@pytest.fixture(scope="session")
def tpu_strategy(tpu_resolver):
    """`compat_distribute.TPUStrategy` on the chosen TPU, built once per session."""
    import compat_distribute  # pylint: disable=g-import-not-at-top

    return compat_distribute.TPUStrategy(tpu_resolver)


@pytest.fixture(scope="session")
def mirrored_strategy():
    """`tf.distribute.MirroredStrategy` over every logical CPU device."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices=cpus)


@pytest.fixture(params=STRATEGY_PARAMS)
def strategy(request):
    """One test body under the default, mirrored and TPU-or-fake strategies."""
    if request.param == "default":
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        return tf.distribute.get_strategy()
    if request.param == "mirrored":
        return request.getfixturevalue("mirrored_strategy")
    return request.getfixturevalue("tpu_strategy")


class _ClusterPool:
    """The session's clusters, one per shape, the `KEPT` used last kept running.

    A test gets a running cluster of its shape: the one kept, when every task
    of it still runs, else a fresh one (the last was torn down by a fault, a
    task died or was killed, or the test stopped it). So a failing test fails
    alone.
    """

    KEPT = 2

    def __init__(self):
        self._clusters = collections.OrderedDict()  # shape -> LocalCluster, oldest first

    def get(self, shape):
        from compat_distribute.testing import cluster  # pylint: disable=g-import-not-at-top

        key = tuple(sorted(shape.items()))
        kept = self._clusters.pop(key, None)
        if kept is not None and kept.running:
            self._clusters[key] = kept
            return kept
        if kept is not None:
            kept.stop()
        while len(self._clusters) >= self.KEPT:
            self._clusters.popitem(last=False)[1].stop()
        fresh = cluster.local_cluster(**shape)
        fresh.start()
        self._clusters[key] = fresh
        return fresh

    def stop(self):
        while self._clusters:
            self._clusters.popitem()[1].stop()


@pytest.fixture(scope="session")
def _compat_distribute_cluster_pool():
    pool = _ClusterPool()
    yield pool
    pool.stop()


@pytest.fixture
def local_cluster(request, _compat_distribute_cluster_pool):  # pylint: disable=redefined-outer-name
    """A running local cluster of the shape the test's marker asks for.

    `@pytest.mark.multi_worker(n, has_chief=False, ps=0)`: n worker processes
    (2 without the marker or n), a chief first and ps parameter servers when
    asked. `run(fn, *args)`
    runs a module-level function in every task (see
    `compat_distribute.testing.cluster.local_cluster`). A healthy cluster of
    the same shape is reused by the next test; one that a fault tore down, or
    whose task died, is replaced before it.
    """
    return _compat_distribute_cluster_pool.get(markers.cluster_shape(request.node))
