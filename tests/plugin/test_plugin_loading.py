"""How pytest finds the plugin: its entry point, and `-p` with the entry point's name.

The entry point is the one in setup.cfg, as an install of this tree declares it
(whatever the installed copy here says): `compat_distribute` names the module
`compat_distribute.testing.pytest.hooks`.
"""

import configparser
import importlib.metadata
import pathlib

import pytest

from plugin_helpers import clean_environment  # noqa: F401  # autouse
from plugin_helpers import usage_error

pytest_plugins = ["pytester"]

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The test project says under which names the plugin's hooks are registered.
_SHOW_REGISTRATION = """
from compat_distribute.testing.pytest import hooks


def pytest_report_header(config):
    names = [name for name, plugin in config.pluginmanager.list_name_plugin() if plugin is hooks]
    return f"hooks registered as {names}"
"""


@pytest.fixture(name="installed_from_setup_cfg")
def installed_from_setup_cfg_fixture(tmp_path, monkeypatch):
    """The installed distributions, with this project's entry points read from setup.cfg."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    entry = config["options.entry_points"]["pytest11"].strip()
    info = tmp_path / "compat_distribute-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: compat_distribute\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\n{entry}\n")
    ours = importlib.metadata.PathDistribution(info)
    installed = importlib.metadata.distributions

    def distributions(**kwargs):
        others = [d for d in installed(**kwargs) if d.metadata["Name"] != "compat_distribute"]
        return others + [ours]

    monkeypatch.setattr(importlib.metadata, "distributions", distributions)
    return entry


def test_setup_cfg_names_the_hooks_module(installed_from_setup_cfg):
    assert installed_from_setup_cfg == "compat_distribute = compat_distribute.testing.pytest.hooks"


@pytest.mark.parametrize(
    "args", [[], ["-p", "compat_distribute"]], ids=["entry-point", "p-entry-point-name"]
)
def test_every_way_in_registers_the_plugin_once(pytester, installed_from_setup_cfg, args):
    del installed_from_setup_cfg
    pytester.makeconftest(_SHOW_REGISTRATION)
    result = pytester.runpytest(*args, "--collect-only", "--tpu=fake", "--fake-tpu-topology=v4-8")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "compat_distribute: tpu=fake (v4-8, 4 cores on CPU), tf-devices=as the tests need",
            "hooks registered as ['compat_distribute']",
        ]
    )


def test_with_autoload_off_p_loads_the_plugin(pytester, monkeypatch, installed_from_setup_cfg):
    del installed_from_setup_cfg
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(_SHOW_REGISTRATION)
    result = pytester.runpytest(
        "-p", "compat_distribute", "--collect-only", "--fake-tpu-topology=v4-8"
    )
    result.stdout.fnmatch_lines(
        [
            "compat_distribute: tpu=fake (v4-8, 4 cores on CPU), tf-devices=as the tests need",
            "hooks registered as ['compat_distribute']",
        ]
    )


def test_p_no_turns_it_off(pytester, installed_from_setup_cfg):
    del installed_from_setup_cfg
    pytester.makeconftest(_SHOW_REGISTRATION)
    result = pytester.runpytest("-p", "no:compat_distribute", "--collect-only")
    result.stdout.fnmatch_lines(["hooks registered as []"])
    assert "compat_distribute:" not in result.stdout.str()
    # Its options are gone with it.
    assert "error: unrecognized arguments: --tpu=fake" in usage_error(
        pytester.runpytest("-p", "no:compat_distribute", "--tpu=fake")
    )

