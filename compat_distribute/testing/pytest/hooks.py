"""The pytest plugin: virtual TensorFlow devices, TPU-or-fake strategies, local clusters.

Installed with the package (entry point `pytest11`, named `compat_distribute`);
with plugin autoloading off, load it with `-p compat_distribute`. This module
holds the hooks; each calls the module of its role:

    options   the options (`pytest --help`, group compat_distribute) and their precedence
    session   the session's state: its settings, its process's role, its TPU
    devices   the logical CPU devices the run needs, created before any test runs
    markers   tpu, multi_device(n), multi_worker(n)
    fixtures  tpu_resolver, tpu_strategy, mirrored_strategy, strategy, local_cluster
    ending    ends the process once a session that used TensorFlow is over

A run that needs nothing leaves TensorFlow alone: no devices, no TPU probe,
and, with no option given, no header line. A TPU NAME that cannot be reached
fails the session instead of falling back to the fake.
"""

import pytest

from compat_distribute.testing.pytest import devices
from compat_distribute.testing.pytest import ending
from compat_distribute.testing.pytest import markers
from compat_distribute.testing.pytest import options
from compat_distribute.testing.pytest import session as session_state
from compat_distribute.testing.pytest import sigterm
# The fixtures are the plugin's when they are attributes of this module.
from compat_distribute.testing.pytest.fixtures import _compat_distribute_cluster_pool  # noqa: F401
from compat_distribute.testing.pytest.fixtures import _compat_distribute_multi_device  # noqa: F401
from compat_distribute.testing.pytest.fixtures import local_cluster  # noqa: F401
from compat_distribute.testing.pytest.fixtures import mirrored_strategy  # noqa: F401
from compat_distribute.testing.pytest.fixtures import strategy  # noqa: F401
from compat_distribute.testing.pytest.fixtures import tpu_resolver  # noqa: F401
from compat_distribute.testing.pytest.fixtures import tpu_strategy  # noqa: F401


def pytest_addoption(parser):
    options.add_to_parser(parser)


def pytest_configure(config):
    for line in markers.LINES:
        config.addinivalue_line("markers", line)
    session = session_state.start(config)
    if session.role is session_state.CONTROLLER:
        sigterm.forward_to_workers()
    devices.set_up_given(session)


def pytest_report_header(config):
    session = session_state.of(config)
    if session is None or not session.settings.any_given:
        return None
    count = session.settings.tf_devices or "as the tests need"
    return f"compat_distribute: tpu={session.tpu().describe()}, tf-devices={count}"


@pytest.hookimpl(tryfirst=True)  # Before the terminal reports the collection.
def pytest_collection_finish(session):
    state = session_state.of(session.config)
    if state is not None:
        devices.set_up_needed(state, session.items, session.config.option.collectonly)


def pytest_report_collectionfinish(config):
    session = session_state.of(config)
    if session is None or session.devices is None:
        return None
    count, why = session.devices
    return f"compat_distribute: {count} logical CPU devices, as the tests need ({why})"


def pytest_collection_modifyitems(config, items):
    markers.skip_tpu_tests_on_the_fake(session_state.of(config), items)


def pytest_runtest_setup(item):
    session = session_state.of(item.config)
    if not session.usable:
        session.tpu().backend()  # Fails the test with why the session cannot run.
    markers.cluster_shape(item)  # Checks the arguments.


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config):
    status = yield  # The session, its report and pytest's clean-up are done.
    ending.end_if_done(config, status)
    return status
