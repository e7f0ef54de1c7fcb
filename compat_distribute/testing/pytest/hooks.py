"""The pytest plugin: virtual TensorFlow devices, TPU-or-fake strategies, local clusters.

Entry point `compat_distribute` (`-p compat_distribute`); each hook calls the module
of its role.
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


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config):
    devices.set_up_before_conftests(early_config)


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
    markers.check_tpu(item)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config):
    status = yield  # The session, its report and pytest's clean-up are done.
    ending.end_if_done(config, status)
    return status
