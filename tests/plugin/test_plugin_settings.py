"""The plugin's options: one table, read from the command line, the environment and ini files.

The precedence rule is written once, in `compat_distribute.testing.pytest.options`;
these tests hold each option, and an option added to the table, to it.
"""

import pytest

from compat_distribute import _tpu_discovery
from compat_distribute.testing import _backend
from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY
from compat_distribute.testing._fake_tpu import PRESETS
from compat_distribute.testing.pytest import options
from plugin_helpers import LIMIT
from plugin_helpers import MAX_HOSTS
from plugin_helpers import POD
from plugin_helpers import POD_HOSTS
from plugin_helpers import clean_environment  # noqa: F401  # autouse
from plugin_helpers import fake_refuses
from plugin_helpers import usage_error

pytest_plugins = ["pytester"]

# --------------------------------------------------------------------------
# Bad values: each message names the option, the value and where it came from.


@pytest.mark.parametrize(
    "args, env, ini, message",
    [
        (
            ["--tf-devices=x"],
            {},
            "",
            "--tf-devices: expected a positive integer, got 'x' (from the command line)",
        ),
        (
            [],
            {"COMPAT_DISTRIBUTE_TF_DEVICES": "0"},
            "",
            "--tf-devices: expected a positive integer, got '0' "
            "(from environment variable COMPAT_DISTRIBUTE_TF_DEVICES)",
        ),
        (
            [],
            {},
            "tf_devices = -3",
            "--tf-devices: expected a positive integer, got '-3' (from ini key tf_devices in {ini})",
        ),
        (
            ["--tpu=my tpu"],
            {},
            "",
            "--tpu: expected 'fake', 'auto' or the name of a TPU (no spaces), got 'my tpu' "
            "(from the command line)",
        ),
        (
            [],
            {"COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY": "v9-1024"},
            "",
            f"--fake-tpu-topology: expected one of {', '.join(map(repr, sorted(PRESETS)))}, "
            "got 'v9-1024' (from environment variable COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY)\n",
        ),
        (
            [],
            {},
            "fake_tpu_strict = maybe",
            "--fake-tpu-strict: expected 1/0, true/false, yes/no or on/off, "
            "got 'maybe' (from ini key fake_tpu_strict in {ini})\n",
        ),
        (
            ["--tf-devices=100000000"],
            {},
            "",
            f"--tf-devices: expected at most {LIMIT} devices (the most one process gets, "
            "compat_distribute.testing.devices.MAX_DEVICES), got '100000000' (from the "
            "command line). Ask for what the tests need: the fake TPU's core count, or the "
            "n of the largest multi_device(n).",
        ),
        (
            [],
            {"COMPAT_DISTRIBUTE_TF_DEVICES": str(LIMIT + 1)},
            "",
            f"--tf-devices: expected at most {LIMIT} devices (the most one process gets, "
            f"compat_distribute.testing.devices.MAX_DEVICES), got '{LIMIT + 1}' (from "
            "environment variable COMPAT_DISTRIBUTE_TF_DEVICES). Ask for what the tests need",
        ),
        (
            [],
            {"XLA_FLAGS": "--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=eight"},
            "",
            "--tf-devices: expected a positive integer, got 'eight' (from "
            "--xla_force_host_platform_device_count in environment variable XLA_FLAGS)\n",
        ),
        (
            ["--fake-tpu-hosts=two"],
            {},
            "",
            "--fake-tpu-hosts: expected a positive integer, got 'two' (from the command line)\n",
        ),
        (
            [],
            {"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": str(MAX_HOSTS + 1)},
            "",
            f"--fake-tpu-hosts: expected at most {MAX_HOSTS} hosts (the most of any fake TPU "
            f"preset), got '{MAX_HOSTS + 1}' (from environment variable "
            "COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS). A fake TPU runs on 1 host (every core in one "
            "process) or on its preset's own hosts (v3-32: 4).\n",
        ),
        (
            [f"--fake-tpu-topology={POD}"],
            {},
            "fake_tpu_hosts = 2",
            "--fake-tpu-hosts=2 (from ini key fake_tpu_hosts in {ini}) does not fit "
            f"--fake-tpu-topology={POD} (from the command line): {fake_refuses(POD, 2)} "
            "Leave --fake-tpu-hosts unset (None) for the topology's own count.\n",
        ),
        (
            [],
            {"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": str(POD_HOSTS)},
            "",
            f"--fake-tpu-hosts={POD_HOSTS} (from environment variable "
            f"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS) does not fit --fake-tpu-topology="
            f"{DEFAULT_TOPOLOGY} (from the default): "
            f"{fake_refuses(DEFAULT_TOPOLOGY, POD_HOSTS)} Leave --fake-tpu-hosts unset (None) "
            "for the topology's own count.\n",
        ),
        (
            ["--tpu=fak"],
            {},
            "",
            "--tpu: expected 'fake', 'auto' or the name of a TPU, got 'fak' (from the command "
            "line). Did you mean --tpu=fake? For a TPU really named 'fak', set TPU_NAME=fak "
            "and pass --tpu=auto.",
        ),
        (
            [],
            {"COMPAT_DISTRIBUTE_TPU": "Auto"},
            "",
            "--tpu: expected 'fake', 'auto' or the name of a TPU, got 'Auto' (from environment "
            "variable COMPAT_DISTRIBUTE_TPU). Did you mean --tpu=auto?",
        ),
    ],
    ids=[
        "cli",
        "env",
        "ini",
        "tpu-name",
        "topology",
        "strict",
        "devices-past-limit",
        "devices-past-limit-env",
        "xla-flags",
        "hosts-not-a-count",
        "hosts-past-limit",
        "hosts-the-pod-lacks",
        "hosts-of-a-one-host-topology",
        "tpu-misspelt",
        "tpu-capitalised",
    ],
)
def test_bad_value_names_its_source(pytester, monkeypatch, args, env, ini, message):
    ini_file = pytester.makeini(f"[pytest]\n{ini}\n")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # A misspelt --tpu must fail before any TPU lookup, here a network call.
    looked_up = []
    monkeypatch.setattr(_backend, "check_resolves", lambda *a, **k: looked_up.append(a))
    monkeypatch.setattr(_tpu_discovery, "connect", lambda *a, **k: looked_up.append(a))
    stderr = usage_error(pytester.runpytest(*args))
    assert f"ERROR: {message.format(ini=ini_file)}" in stderr
    assert looked_up == []


def test_precedence_command_line_then_environment_then_ini(pytester, monkeypatch):
    # The fake's topology shows in the header; v4-8 has 4 cores, v2-8 has 8.
    pytester.makeini("[pytest]\nfake_tpu_topology = v2-8\nfake_tpu_strict = on\n")
    header = "compat_distribute: tpu=fake ({}), tf-devices=as the tests need"

    result = pytester.runpytest("--collect-only")
    result.stdout.fnmatch_lines([header.format("v2-8, 8 cores on CPU, strict")])

    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY", "v4-8")
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_STRICT", "0")
    result = pytester.runpytest("--collect-only")
    result.stdout.fnmatch_lines([header.format("v4-8, 4 cores on CPU")])

    result = pytester.runpytest("--collect-only", "--fake-tpu-topology=v2-8", "--fake-tpu-strict")
    result.stdout.fnmatch_lines([header.format("v2-8, 8 cores on CPU, strict")])

    # The off switch wins over the environment and the ini key.
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_STRICT", "1")
    result = pytester.runpytest("--collect-only", "--no-fake-tpu-strict")
    result.stdout.fnmatch_lines([header.format("v4-8, 4 cores on CPU")])

    # A value that loses is not read, so it cannot fail the session.
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY", "v9-9")
    result = pytester.runpytest("--collect-only", "--fake-tpu-topology=v4-8", "--tf-devices=4")
    result.stdout.fnmatch_lines(["compat_distribute: tpu=fake (v4-8, 4 cores on CPU, strict), "
                                 "tf-devices=4"])


def test_help_names_the_limit_the_xla_flag_and_the_off_switch(pytester):
    result = pytester.runpytest("--help")
    assert result.ret == pytest.ExitCode.OK
    text = " ".join(result.stdout.str().split())
    assert (
        f"--tf-devices=N split the CPU into N virtual TensorFlow devices at start-up, N at most "
        f"{LIMIT} (default: --xla_force_host_platform_device_count=N from XLA_FLAGS if set, "
        "else as many as the collected tests need: the fake TPU's cores when a test uses its "
        "fixtures, the largest multi_device(n)) [env COMPAT_DISTRIBUTE_TF_DEVICES, ini "
        "tf_devices]"
    ) in text
    assert "--no-fake-tpu-strict turn --fake-tpu-strict off, over the environment and ini" in text
    assert (
        "--fake-tpu-hosts=N host processes of the fake TPU: 1 puts every core of a pod preset "
        "(e.g. v3-32) in the test process, as virtual devices; a pod preset's own count "
        "(v3-32: 4) runs a host process each (default: the topology's own count) [env "
        "COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS, ini fake_tpu_hosts]"
    ) in text


def test_settings_are_read_in_precedence_order():
    ini = {"tf_devices": "2", "tpu": "auto"}
    env = {"COMPAT_DISTRIBUTE_TF_DEVICES": "4", "COMPAT_DISTRIBUTE_FAKE_TPU_STRICT": "yes"}
    settings = options.read(cli={"tf_devices": "8"}, env=env, ini=ini, ini_path="setup.cfg")
    assert (settings.tf_devices, settings.tpu) == (8, "auto")
    assert settings.fake_tpu_topology == DEFAULT_TOPOLOGY
    assert settings.fake_tpu_strict is True
    assert settings.source("tf_devices") == "the command line"
    assert settings.source("tpu") == "ini key tpu in setup.cfg"
    assert settings.source("fake_tpu_topology") == "the default"
    assert (
        settings.source("fake_tpu_strict")
        == "environment variable COMPAT_DISTRIBUTE_FAKE_TPU_STRICT"
    )
    assert settings.any_given
    assert not options.read(env={"COMPAT_DISTRIBUTE_TPU": ""}, ini={"tpu": ""}).any_given
    # The off switch arrives as False and wins like any value.
    off = options.read(cli={"fake_tpu_strict": False}, env=env)
    assert (off.fake_tpu_strict, off.source("fake_tpu_strict")) == (False, "the command line")


def test_xla_flags_device_count_comes_after_the_ini_key():
    xla = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2 --xla_cpu_enable_fast_math=false "
                        "-xla_force_host_platform_device_count=16"}
    settings = options.read(env=xla)
    # The last flag wins, as XLA reads them; TensorFlow itself ignores the flag.
    assert settings.tf_devices == 16
    assert settings.source("tf_devices") == (
        "--xla_force_host_platform_device_count in environment variable XLA_FLAGS"
    )
    assert settings.any_given
    assert options.read(env=xla, ini={"tf_devices": "4"}).tf_devices == 4
    assert options.read(env={"XLA_FLAGS": "--xla_dump_to=/tmp/x"}).tf_devices is None
    assert options.from_environment(xla).tf_devices == 16  # TestCase reads it too.


def test_host_count_is_read_in_precedence_order_and_defaults_to_the_topologys_own():
    # No host count: the topology's own, on a one-host slice and on a pod.
    default = options.read()
    assert (default.given_hosts, default.fake_tpu_hosts) == (None, 1)
    assert default.source("fake_tpu_hosts") == "the default"
    pod = options.read(cli={"fake_tpu_topology": POD})
    assert (pod.given_hosts, pod.fake_tpu_hosts) == (None, POD_HOSTS)
    assert pod.shown("fake_tpu_hosts") == f"--fake-tpu-hosts={POD_HOSTS} (from the default)"
    # Command line > environment variable > ini key; an empty value is not set.
    ini = {"fake_tpu_topology": POD, "fake_tpu_hosts": str(POD_HOSTS)}
    env = {"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": "1"}
    from_ini = options.read(env={"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": ""}, ini=ini)
    assert (from_ini.fake_tpu_hosts, from_ini.source("fake_tpu_hosts")) == (
        POD_HOSTS,
        "ini key fake_tpu_hosts",
    )
    from_env = options.read(env=env, ini=ini)
    assert (from_env.fake_tpu_hosts, from_env.source("fake_tpu_hosts")) == (
        1,
        "environment variable COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS",
    )
    from_cli = options.read(cli={"fake_tpu_hosts": f" 0{POD_HOSTS} "}, env=env, ini=ini)
    assert (from_cli.fake_tpu_hosts, from_cli.source("fake_tpu_hosts")) == (
        POD_HOSTS,
        "the command line",
    )
    assert from_cli.any_given
    # 1 fits every preset; the environment is the TestCase's way in.
    one_host = {"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": "1"}
    assert options.from_environment(one_host).fake_tpu_hosts == 1
    one_host["COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY"] = POD
    assert options.from_environment(one_host).fake_tpu_hosts == 1


def test_a_host_count_is_bounded_and_must_fit_the_topology():
    # A count of a thousand digits is refused without being converted.
    with pytest.raises(options.SettingError) as raised:
        options.read(cli={"fake_tpu_hosts": "9" * 1000})
    assert str(raised.value).startswith(
        f"--fake-tpu-hosts: expected at most {MAX_HOSTS} hosts (the most of any fake TPU preset)"
    )
    # What THIS topology accepts: 1 or its own hosts (the fake's words), and what to do.
    for topology, hosts, accepted in [
        (POD, 2, f"1 (every core in this process) or {POD_HOSTS} (its hosts)"),
        ("v4-16", 4, "1 (every core in this process) or 2 (its hosts)"),
        ("v5litepod-8", 2, "1 for the TPU slice 'v5litepod-8'"),
    ]:
        env = {
            "COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY": topology,
            "COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": str(hosts),
        }
        with pytest.raises(options.SettingError) as raised:
            options.from_environment(env)
        message = str(raised.value)
        assert message == (
            f"--fake-tpu-hosts={hosts} (from environment variable "
            f"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS) does not fit --fake-tpu-topology={topology} "
            f"(from environment variable COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY): "
            f"{fake_refuses(topology, hosts)} Leave --fake-tpu-hosts unset (None) for the "
            f"topology's own count."
        )
        assert f"hosts must be None or {accepted}" in message
        assert "pick a pod preset (v2-32, v3-32," in message



# --------------------------------------------------------------------------
# A new option is one more row of the table, and nothing else.


def _whole_number(raw):
    if not raw.isdigit():
        raise ValueError("expected a whole number")
    return int(raw)


_NEW_OPTION = options.Option(
    name="demo_steps",
    flag="--demo-steps",
    env="COMPAT_DISTRIBUTE_DEMO_STEPS",
    parse=_whole_number,
    default=3,
    help="steps of a demonstration option",
    metavar="N",
)

# The test project's header shows what the session read for the new option.
_SHOW_NEW_OPTION = """
from compat_distribute.testing.pytest import session


def pytest_report_header(config):
    settings = session.of(config).settings
    return f"demo_steps={settings.demo_steps!r} from {settings.source('demo_steps')}"
"""


def test_an_option_added_to_the_table_is_read_from_every_place_in_order(pytester, monkeypatch):
    monkeypatch.setattr(options, "OPTIONS", options.OPTIONS + (_NEW_OPTION,))
    pytester.makeconftest(_SHOW_NEW_OPTION)

    help_text = " ".join(pytester.runpytest("--help").stdout.str().split())
    assert (
        "--demo-steps=N steps of a demonstration option [env COMPAT_DISTRIBUTE_DEMO_STEPS, "
        "ini demo_steps]"
    ) in help_text
    assert "demo_steps (string): steps of a demonstration option" in help_text

    pytester.runpytest("--collect-only").stdout.fnmatch_lines(["demo_steps=3 from the default"])
    ini = pytester.makeini("[pytest]\ndemo_steps = 5\n")
    pytester.runpytest("--collect-only").stdout.fnmatch_lines(
        [f"demo_steps=5 from ini key demo_steps in {ini}"]
    )
    monkeypatch.setenv("COMPAT_DISTRIBUTE_DEMO_STEPS", "7")
    pytester.runpytest("--collect-only").stdout.fnmatch_lines(
        ["demo_steps=7 from environment variable COMPAT_DISTRIBUTE_DEMO_STEPS"]
    )
    pytester.runpytest("--collect-only", "--demo-steps=9").stdout.fnmatch_lines(
        ["demo_steps=9 from the command line"]
    )
    # A bad value is refused as any option's is: the option, the value, its place.
    monkeypatch.setenv("COMPAT_DISTRIBUTE_DEMO_STEPS", "many")
    stderr = usage_error(pytester.runpytest("--collect-only"))
    assert (
        "ERROR: --demo-steps: expected a whole number, got 'many' (from environment variable "
        "COMPAT_DISTRIBUTE_DEMO_STEPS)\n"
    ) in stderr
    # The other options are read as before.
    settings = options.read(cli={"demo_steps": "2"}, env={"COMPAT_DISTRIBUTE_TPU": "auto"})
    assert (settings.demo_steps, settings.tpu, settings.source("tpu")) == (
        2,
        "auto",
        "environment variable COMPAT_DISTRIBUTE_TPU",
    )
