"""The plugin's fixtures, and the skip of a `multi_device(n)` test with fewer replicas."""

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


@pytest.fixture(scope="session")
def local_cluster():
    """A 2-worker cluster of local processes, started once for the session.

    `local_cluster.run(fn, *args)` runs a module-level function in both
    workers (see `compat_distribute.testing.cluster.local_cluster`). Mark the
    tests that use it `@pytest.mark.multi_worker(2)`.
    """
    from compat_distribute.testing import cluster  # pylint: disable=g-import-not-at-top

    with cluster.local_cluster(2) as running:
        yield running
