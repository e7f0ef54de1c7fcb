"""pytest plugin: virtual TensorFlow devices, TPU-or-fake strategies, local clusters.

Installed with the package (entry point `pytest11`). Options, each also an
environment variable and an ini key:

    --tf-devices=N           COMPAT_DISTRIBUTE_TF_DEVICES         tf_devices
    --tpu=fake|auto|NAME     COMPAT_DISTRIBUTE_TPU                tpu
    --fake-tpu-topology=T    COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY  fake_tpu_topology
    --fake-tpu-hosts=N       COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS     fake_tpu_hosts
    --[no-]fake-tpu-strict   COMPAT_DISTRIBUTE_FAKE_TPU_STRICT    fake_tpu_strict

Precedence: command line > environment variable > ini key > default (for the
device count, JAX's XLA_FLAGS=--xla_force_host_platform_device_count=N comes
between the ini key and the default). An empty environment variable or ini
value counts as not set. A bad value stops the session with a
`pytest.UsageError` naming the option, the value and its source; so do a
host count the topology does not have (1 or a pod preset's own count) and a
device count below the fake TPU's cores.

Devices are configured once per process, before any test runs, never from
which test comes first: a given count (`--tf-devices=N`) in `pytest_configure`,
before collection imports TensorFlow; otherwise, once collection is done, as
many as the selected tests need: the fake TPU's cores when a test uses the
harness's strategy fixtures (a pod preset's too with `--fake-tpu-hosts=1`;
on its own hosts a pod needs none here), and the largest n of
`multi_device(n)`. Each pytest-xdist worker collects every test, so each one
reaches the same count.
A run that needs nothing leaves TensorFlow alone: no devices, no TPU probe,
and, with no setting given, no header line. `--tpu` is resolved in
`pytest_configure` too (see `_tpu_backend`): a NAME that cannot be reached
fails the session instead of falling back to the fake.

Fixtures: `tpu_resolver`, `tpu_strategy`, `mirrored_strategy`
(MirroredStrategy over all logical CPUs) and `local_cluster` (session scope),
and `strategy`, parametrised as "default", "mirrored" (`mirrored_strategy`) and
"tpu" (`tpu_strategy`).

Markers:
    tpu               needs a real TPU; skipped on the fake.
    multi_device(n)   needs n replicas; skipped with fewer. Replicas are those
                      of the strategy the test uses (`strategy` for its current
                      parameter, else `tpu_strategy`); a test using neither
                      counts the logical CPU devices.
    multi_worker(n)   starts n worker processes (n may be left out).
"""

import os

import pytest

from compat_distribute.testing import _settings
from compat_distribute.testing import devices

_SETTINGS = pytest.StashKey()
_BACKEND = pytest.StashKey()
_DEVICES = pytest.StashKey()  # (count, why) configured after collection

STRATEGY_PARAMS = ("default", "mirrored", "tpu")
# Fixtures that build a strategy on the harness's devices: a run using one gets
# at least the fake TPU's core count.
_STRATEGY_FIXTURES = ("strategy", "tpu_strategy", "tpu_resolver", "mirrored_strategy")

_MARKERS = (
    "tpu: needs a real TPU; skipped when the TPU is the fake (compat_distribute)",
    "multi_device(n): needs at least n replicas; skipped with fewer (compat_distribute)",
    "multi_worker(n): starts n real worker processes; n may be left out (compat_distribute)",
)


def _dest(option):
    return f"compat_distribute_{option.name}"


def pytest_addoption(parser):
    group = parser.getgroup(
        "compat_distribute", "TensorFlow devices, fake TPU and local clusters (compat_distribute)"
    )
    for option in _settings.OPTIONS:
        where = f" [env {option.env}, ini {option.name}]"
        if option.is_flag:
            group.addoption(
                option.flag,
                action="store_true",
                default=None,
                dest=_dest(option),
                help=option.help + where,
            )
            group.addoption(
                option.off_flag,
                action="store_false",
                default=None,
                dest=_dest(option),
                help=f"turn {option.flag} off, over the environment and ini",
            )
        else:
            group.addoption(
                option.flag,
                action="store",
                default=None,
                dest=_dest(option),
                metavar=option.metavar,
                help=option.help + where,
            )
        parser.addini(option.name, option.help, default="")


def _is_xdist_controller(config):
    """The xdist process that hands out tests and runs none itself."""
    return not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no"


def _is_xdist_worker(config):
    return hasattr(config, "workerinput")


def _read_settings(config):
    try:
        return _settings.read(
            cli={o.name: config.getoption(_dest(o)) for o in _settings.OPTIONS},
            env=os.environ,
            ini={o.name: config.getini(o.name) for o in _settings.OPTIONS},
            ini_path=config.inipath,
        )
    except _settings.SettingError as e:
        raise pytest.UsageError(str(e)) from None


def _create_devices(count, what):
    """Creates `count` logical CPUs; returns why not (a message) when it came too late."""
    try:
        devices.set_virtual_devices(count)
    except RuntimeError as e:
        return f"{what}: {e}"
    return None


def _unreachable(settings, error):
    return (
        f"--tpu={settings.tpu} (from {settings.source('tpu')}): {error}\nNot falling "
        f"back to the fake TPU: pass --tpu=fake to use the fake, or --tpu=auto to use "
        f"a TPU only when one is here."
    )


def _stop(config, message):
    """Ends the session with `message` as a usage error.

    Except in an xdist worker (xdist would restart a worker that fails to
    start, again and again): there the message is returned, to fail every test.
    """
    if _is_xdist_worker(config):
        return message
    raise pytest.UsageError(message)


def _choose_backend(config, settings):
    """The `Backend`; None on an xdist controller, whose workers choose for themselves.

    A TPU that cannot be reached, or a fake with more cores than the devices
    asked for, stops the session (see `_stop`): the message is returned.
    """
    from compat_distribute.testing import _backend as _tpu_backend  # pylint: disable=g-import-not-at-top

    try:
        if settings.tpu != "fake" and _is_xdist_controller(config):
            # Only the workers connect (holding the TPU here would lock them
            # out); a name that does not resolve can still stop the session here.
            if settings.tpu != "auto":
                _tpu_backend.check_resolves(settings.tpu)
            return None
        backend = _tpu_backend.choose(settings)
    except _tpu_backend.TPUUnreachableError as e:
        return _stop(config, _unreachable(settings, e))
    if not backend.is_real:
        try:
            _settings.check_devices_hold_fake(settings, backend.local_cores)
        except _settings.SettingError as e:
            return _stop(config, str(e))
    return backend


def pytest_configure(config):
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    settings = _read_settings(config)
    config.stash[_SETTINGS] = settings
    config.stash[_BACKEND] = None
    config.stash[_DEVICES] = None
    if not settings.any_given:
        return  # Nothing chosen yet; collection says what the run needs.
    backend = None
    if settings.tpu == "fake":  # The fake checks the count before any device exists.
        backend = _choose_backend(config, settings)
    if settings.tf_devices and not _is_xdist_controller(config) and not isinstance(backend, str):
        failed = _create_devices(settings.tf_devices, settings.shown("tf_devices"))
        if failed:
            backend = _stop(config, failed)
    if backend is None:  # After the devices: connecting to a real TPU starts TensorFlow.
        backend = _choose_backend(config, settings)
    config.stash[_BACKEND] = backend


def _backend(config):
    """The chosen backend, chosen now if pytest_configure did not need to."""
    if config.stash.get(_BACKEND, None) is None:
        config.stash[_BACKEND] = _choose_backend(config, config.stash[_SETTINGS])
    backend = config.stash[_BACKEND]
    if isinstance(backend, str):
        pytest.fail(backend, pytrace=False)
    return backend


def pytest_report_header(config):
    settings = config.stash.get(_SETTINGS, None)
    if settings is None or not settings.any_given:
        return None
    backend = config.stash.get(_BACKEND, None)
    if backend is None:
        done = "chosen" if settings.tpu == "auto" else "connected"
        tpu = f"{settings.tpu} ({done} in each xdist worker)"
    elif isinstance(backend, str):
        tpu = f"{settings.tpu} (not usable)"
    else:
        tpu = backend.describe()
    count = settings.tf_devices or "as the tests need"
    return f"compat_distribute: tpu={tpu}, tf-devices={count}"


def _fake_cores(config):
    """The fake TPU's cores on this process's devices; 0 when the TPU is real, is
    a pod on its own hosts (they hold the cores) or cannot be used."""
    backend = config.stash.get(_BACKEND, None)
    if backend is None:
        backend = config.stash[_BACKEND] = _choose_backend(config, config.stash[_SETTINGS])
    if backend is None or isinstance(backend, str):
        return 0
    return backend.local_cores


def _devices_needed(config, items):
    """(count, why): the logical CPUs the selected `items` need, from their markers
    and the fixtures they use; count 0 when they need none."""
    needs = []
    marked = [_marker_count_problem(item, "multi_device")[0] for item in items]
    largest = max((n for n in marked if n is not None), default=0)
    if largest > 1:
        needs.append((largest, f"the largest multi_device(n) is {largest}"))
    # Items of other plugins (a linter's, a YAML file's) may have no fixtures.
    uses = (name for item in items for name in getattr(item, "fixturenames", ()))
    if any(name in _STRATEGY_FIXTURES for name in uses):
        cores = _fake_cores(config)
        if cores:
            needs.append((cores, f"the fake TPU has {cores} cores"))
    return max((n for n, _ in needs), default=0), "; ".join(why for _, why in needs)


@pytest.hookimpl(tryfirst=True)  # Before the terminal reports the collection.
def pytest_collection_finish(session):
    """Creates the devices the collected tests need, before any of them runs."""
    config = session.config
    settings = config.stash.get(_SETTINGS, None)
    if (
        settings is None
        or settings.tf_devices
        or config.option.collectonly
        or isinstance(config.stash.get(_BACKEND, None), str)
    ):
        return
    count, why = _devices_needed(config, session.items)
    if count <= 1:
        return
    failed = _create_devices(count, f"the tests need {count} logical CPU devices ({why})")
    if failed:
        enough = max(count, _fake_cores(config))  # A given count must hold the fake too.
        config.stash[_BACKEND] = _stop(
            config,
            f"{failed}\nHere TensorFlow started during collection (a test module or "
            f"conftest.py ran TensorFlow at import): pass --tf-devices={enough}, which "
            f"creates the devices before collection.",
        )
        return
    config.stash[_DEVICES] = (count, why)


def pytest_report_collectionfinish(config):
    configured = config.stash.get(_DEVICES, None)
    if configured is None:
        return None
    count, why = configured
    return f"compat_distribute: {count} logical CPU devices, as the tests need ({why})"


# --------------------------------------------------------------------------
# Markers


def _marker_count_problem(item, name):
    """(n, problem) of @pytest.mark.<name>(n): n is None when left out or bad,
    problem None or what is wrong (a multi_device n is at most MAX_DEVICES)."""
    marker = item.get_closest_marker(name)
    if marker is None or not (marker.args or marker.kwargs):
        return None, None
    if len(marker.args) + len(marker.kwargs) > 1 or set(marker.kwargs) - {"n"}:
        given = [repr(a) for a in marker.args] + [f"{k}={v!r}" for k, v in marker.kwargs.items()]
        return None, (
            f"@pytest.mark.{name}(n) takes one count, n; got {name}({', '.join(given)}) "
            f"in {item.nodeid}. Write e.g. @pytest.mark.{name}(2)."
        )
    n = marker.kwargs.get("n", marker.args[0] if marker.args else None)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return None, (
            f"@pytest.mark.{name}(n): n must be a positive int; got {n!r} in "
            f"{item.nodeid}. Write e.g. @pytest.mark.{name}(2)."
        )
    if name == "multi_device":
        try:
            devices.check_count(f"@pytest.mark.multi_device(n) in {item.nodeid}: n", n)
        except ValueError as e:
            return None, str(e)
    return n, None


def _marker_count(item, name):
    """The n of @pytest.mark.<name>(n), None when left out; fails a bad n."""
    n, problem = _marker_count_problem(item, name)
    if problem:
        pytest.fail(problem, pytrace=False)
    return n


def pytest_collection_modifyitems(config, items):
    tpu_tests = [item for item in items if item.get_closest_marker("tpu") is not None]
    if not tpu_tests or isinstance(config.stash.get(_BACKEND, None), str):
        return  # Nothing to mark, or every test fails anyway.
    backend = _backend(config)
    if backend.is_real:
        return
    settings = config.stash[_SETTINGS]
    # A skip mark rather than a skip call here, so the report points at the test.
    skip = pytest.mark.skip(
        reason=f"needs a real TPU; the TPU here is {backend.describe()} "
        f"(--tpu={settings.tpu}, from {settings.source('tpu')})"
    )
    for item in tpu_tests:
        item.add_marker(skip)


def pytest_runtest_setup(item):
    if isinstance(item.config.stash.get(_BACKEND, None), str):
        _backend(item.config)  # Fails the test with why the session cannot run.
    _marker_count(item, "multi_worker")  # Checks the argument.


@pytest.fixture(autouse=True)
def _compat_distribute_multi_device(request):
    """Skips a multi_device(n) test that has fewer than n replicas."""
    marker = request.node.get_closest_marker("multi_device")
    if marker is None:
        return
    needed = _marker_count(request.node, "multi_device")
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


# --------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def tpu_resolver(pytestconfig):
    """The resolver of the TPU chosen by --tpu: a real TPU's, or the fake's.

    A fake pod's hosts stop when the session ends.
    """
    resolver = _backend(pytestconfig).make_resolver()
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
