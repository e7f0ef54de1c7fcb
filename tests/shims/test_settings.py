"""The settings table (`compat_distribute._env`): every COMPAT_DISTRIBUTE_* variable is a
row, every reader reads its row, and a bad value is one line naming the variable, the
value and what is accepted."""

import ast
import os
import pathlib
import re
import types

import pytest

import compat_distribute
from compat_distribute import _cluster_wait
from compat_distribute import _env
from compat_distribute import _exit
from compat_distribute.testing import deadlines
from compat_distribute.testing import devices
from compat_distribute.testing.cluster import zygote
from compat_distribute.testing.cluster import netns
from compat_distribute.testing.pytest import ending
from compat_distribute.testing.pytest import options

PACKAGE = pathlib.Path(compat_distribute.__file__).parent


def _pod_network():
    from compat_distribute.testing._fake_tpu import pod

    return pod.for_slice("v4-16", (2, 2, 2, 1), 2, "CPU").network  # not started


def _trace_mode():
    from compat_distribute.testing._fake_tpu import replicate

    return replicate.mode_from_environment()


def _session_end():
    ended = []
    real = _exit.end_process
    _exit.end_process = ended.append
    try:  # an xdist worker's session owns its process
        ending.end_if_done(types.SimpleNamespace(workerinput={}), 3)
    finally:
        _exit.end_process = real
    return ended == [3]


def _plugin(option):
    return lambda: getattr(options.from_environment(os.environ), option)


# Each variable's reader (reading os.environ), a value it refuses, and (good value, result).
READERS = {
    "COMPAT_DISTRIBUTE_TF_DEVICES": (_plugin("tf_devices"), "many", ("4", 4)),
    "COMPAT_DISTRIBUTE_TPU": (_plugin("tpu"), "fkae", ("auto", "auto")),
    "COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY": (_plugin("fake_tpu_topology"), "v9-9", ("v4-8", "v4-8")),
    "COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": (_plugin("fake_tpu_hosts"), "x", ("1", 1)),
    "COMPAT_DISTRIBUTE_FAKE_TPU_STRICT": (_plugin("fake_tpu_strict"), "maybe", ("on", True)),
    "COMPAT_DISTRIBUTE_FAKE_TPU_TRACE": (_trace_mode, "twice", ("per_replica", "per_replica")),
    "COMPAT_DISTRIBUTE_POD_NETWORK": (_pod_network, "loopback", ("host", "host")),
    "COMPAT_DISTRIBUTE_ZYGOTE": (zygote.wanted, "2", ("0", False)),
    "COMPAT_DISTRIBUTE_TIMEOUT_SCALE": (deadlines.scale, "abc", ("2.5", 2.5)),
    "COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT": (_cluster_wait.deadline, "86401", ("600", 600.0)),
    "COMPAT_DISTRIBUTE_END_PROCESS": (_session_end, "maybe", ("0", False)),
}


def test_every_row_has_a_reader_here():
    assert sorted(READERS) == sorted(v.name for v in _env.VARIABLES)


@pytest.mark.parametrize("name", sorted(READERS))
def test_each_reader_reads_its_row(name, monkeypatch):
    reader, bad, (good, value) = READERS[name]
    monkeypatch.setenv(name, good)
    assert reader() == value
    monkeypatch.setenv(name, bad)
    with pytest.raises(_env.SettingError) as raised:
        reader()
    message = str(raised.value)
    assert "\n" not in message and name in message and repr(bad) in message
    if _env.variable(name).option:  # the plugin's own words: the flag, the value, the place
        assert f"(from environment variable {name})" in message
    else:
        assert message == str(_env.error(_env.variable(name), bad))


@pytest.mark.parametrize("name", sorted(READERS))
def test_unset_or_blank_is_the_default(name, monkeypatch):
    row = _env.variable(name)
    monkeypatch.delenv(name, raising=False)
    assert _env.read(name) == row.default
    assert _env.read(name, {name: "  "}) == row.default


def test_a_bad_value_is_one_line_with_the_variable_the_value_and_what_is_accepted():
    with pytest.raises(_env.SettingError) as raised:
        _env.read("COMPAT_DISTRIBUTE_TIMEOUT_SCALE", {"COMPAT_DISTRIBUTE_TIMEOUT_SCALE": "abc"})
    assert str(raised.value) == (
        "COMPAT_DISTRIBUTE_TIMEOUT_SCALE must be a number > 0 and at most 100; got 'abc'. It "
        "multiplies every time limit given to a child process (e.g. 3 on a loaded machine). "
        "Set it so, or unset it for the default (1)."
    )
    with pytest.raises(ValueError) as raised:  # SettingError is a ValueError
        _env.read("COMPAT_DISTRIBUTE_TPU", {"COMPAT_DISTRIBUTE_TPU": "fkae"})
    assert "Did you mean --tpu=fake?" in str(raised.value)  # the plugin's advice, kept


@pytest.mark.parametrize(
    "parser, good, bad",
    [
        (_env.Number(100), [("3", 3.0), ("100", 100.0), ("0.5", 0.5)], ["0", "-1", "nan", "inf", "101", "3s"]),
        (_env.Count(10), [("1", 1), ("010", 10)], ["0", "11", "-1", "1.5", "x", "9" * 40]),
        (_env.Choice(("a", "b")), [("a", "a")], ["A", "c"]),
        (_env.Boolean(), [("YES", True), ("off", False), (True, True)], ["2", "maybe"]),
    ],
)
def test_shared_parsers(parser, good, bad):
    for text, value in good:
        assert parser(text) == value
    for text in bad:
        with pytest.raises(ValueError, match=re.escape(parser.accepts)):
            parser(text)


def test_check_all_refuses_a_bad_value_and_a_name_that_is_no_setting():
    _env.check_all({"COMPAT_DISTRIBUTE_ZYGOTE": "0", "HOME": "/"})
    with pytest.raises(_env.SettingError, match="^COMPAT_DISTRIBUTE_ZYGOTE must be 1/0"):
        _env.check_all({"COMPAT_DISTRIBUTE_ZYGOTE": "2"})
    with pytest.raises(_env.SettingError) as raised:
        _env.check_all({"COMPAT_DISTRIBUTE_ZYGOT": "0"})
    assert str(raised.value).startswith(
        "COMPAT_DISTRIBUTE_ZYGOT is not a compat_distribute setting. Did you mean "
        "COMPAT_DISTRIBUTE_ZYGOTE? The settings are COMPAT_DISTRIBUTE_TF_DEVICES, "
    )


def test_the_session_end_is_switched_off_by_its_row(monkeypatch):
    monkeypatch.setenv("COMPAT_DISTRIBUTE_END_PROCESS", "0")
    assert _session_end() is False
    monkeypatch.setenv("COMPAT_DISTRIBUTE_END_PROCESS", "1")
    assert _session_end() is True


# The table agrees with what it cannot import (the core imports no harness module).


def test_the_plugin_options_are_the_rows_that_name_them():
    assert {o.name: o.env for o in options.OPTIONS} == {
        v.option: v.name for v in _env.VARIABLES if v.option
    }
    assert options.SettingError is _env.SettingError


def test_rows_say_what_the_harness_accepts():
    from compat_distribute.testing._fake_tpu import replicate

    assert set(_env.variable("COMPAT_DISTRIBUTE_FAKE_TPU_TRACE").parse.values) == set(replicate.MODES)
    assert set(_env.variable("COMPAT_DISTRIBUTE_POD_NETWORK").parse.values) == set(netns.NETWORKS)
    assert f"to {devices.MAX_DEVICES}" in _env.variable("COMPAT_DISTRIBUTE_TF_DEVICES").parse.accepts
    assert _env.variable("COMPAT_DISTRIBUTE_FAKE_TPU_TRACE").default == replicate.DEFAULT_MODE


def test_every_variable_named_in_the_package_is_a_row():
    named = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                named.update(re.findall(r"\bCOMPAT_DISTRIBUTE_[A-Z0-9_]+", node.value))
    assert named - {v.name for v in _env.VARIABLES} == set()
    assert len(named) >= len(_env.VARIABLES)


def test_a_new_row_is_read_checked_and_listed(monkeypatch):
    row = _env.Variable("COMPAT_DISTRIBUTE_DEMO", _env.Count(5), 2, "2", "counts demos", "demo.md")
    monkeypatch.setattr(_env, "VARIABLES", _env.VARIABLES + (row,))
    monkeypatch.setitem(_env._BY_NAME, row.name, row)  # pylint: disable=protected-access
    assert _env.read(row.name, {row.name: "4"}) == 4
    with pytest.raises(_env.SettingError, match="COMPAT_DISTRIBUTE_DEMO must be a whole number from 1 to 5; got '9'"):
        _env.check_all({row.name: "9"})
    assert "| `COMPAT_DISTRIBUTE_DEMO` | a whole number from 1 to 5 | 2 | Counts demos | [demo.md](demo.md) |" in _env.markdown()
