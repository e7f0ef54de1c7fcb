"""The pytest plugin's former module path, still accepted by `-p` and `pytest_plugins`.

The plugin is `compat_distribute.testing.pytest.hooks`, installed under the
entry point name `compat_distribute`. Registering that module a second time
under this path would make pytest refuse it ("Plugin already registered under
a different name"), so this module holds no hooks: once pytest registers it,
it registers the plugin under `compat_distribute` unless it is there already.
"""

from compat_distribute.testing.pytest import hooks

ENTRY_POINT_NAME = "compat_distribute"


def pytest_addhooks(pluginmanager):
    # The one hook pytest calls with the plugin manager as soon as this module
    # is registered: before the entry points load, when named with `-p`.
    if pluginmanager.is_registered(hooks):
        return
    taken = pluginmanager.get_plugin(ENTRY_POINT_NAME) is not None
    # Taken: an older install's entry point names this module itself.
    pluginmanager.register(hooks, hooks.__name__ if taken else ENTRY_POINT_NAME)
