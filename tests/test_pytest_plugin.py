"""The pytest plugin, run on small test projects through pytest's `pytester`.

Runs that configure TensorFlow devices use `runpytest_subprocess` (a fresh
TensorFlow runtime each); runs that change nothing in TensorFlow (bad values,
the header, an unreachable TPU, "auto" without a TPU) run in this process.
"""

import math
import threading
import time

import pytest
import tensorflow as tf

from compat_distribute.testing.pytest import options as _settings
from compat_distribute import _tpu_discovery
from compat_distribute.testing import _tpu_backend
from compat_distribute.testing import cluster as cluster_lib
from compat_distribute.testing import devices
from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY
from compat_distribute.testing._fake_tpu import PRESETS
from compat_distribute.testing._fake_tpu import TOPOLOGIES
from compat_distribute.testing._fake_tpu import topologies

pytest_plugins = ["pytester"]

ENV_VARS = tuple(option.env for option in _settings.OPTIONS) + ("TPU_NAME", "XLA_FLAGS")
DEFAULT_CORES = math.prod(TOPOLOGIES[DEFAULT_TOPOLOGY])
DEFAULT_FAKE = f"fake ({DEFAULT_TOPOLOGY}, {DEFAULT_CORES} cores on CPU"  # ")" left off
LIMIT = devices.MAX_DEVICES
MAX_HOSTS = max(preset.hosts for preset in PRESETS.values())
POD = "v3-32"  # 4 hosts of 8 cores
POD_HOSTS, POD_CORES = PRESETS[POD].hosts, PRESETS[POD].cores


def _fake_refuses(topology, hosts):
    """What the fake itself says of `hosts=` for `topology` (the settings quote it)."""
    try:
        topologies.host_count(topology, hosts)
    except ValueError as e:
        return str(e)
    raise AssertionError(f"the fake takes hosts={hosts} for {topology}")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def _usage_error(result):
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    return result.stderr.str()


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
            "--fake-tpu-strict: expected one of 1, true, yes, on, 0, false, no, off, "
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
            f"--fake-tpu-topology={POD} (from the command line): {_fake_refuses(POD, 2)} "
            "Leave --fake-tpu-hosts unset (None) for the topology's own count.\n",
        ),
        (
            [],
            {"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": str(POD_HOSTS)},
            "",
            f"--fake-tpu-hosts={POD_HOSTS} (from environment variable "
            f"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS) does not fit --fake-tpu-topology="
            f"{DEFAULT_TOPOLOGY} (from the default): "
            f"{_fake_refuses(DEFAULT_TOPOLOGY, POD_HOSTS)} Leave --fake-tpu-hosts unset (None) "
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
    monkeypatch.setattr(_tpu_backend, "check_resolves", lambda *a, **k: looked_up.append(a))
    monkeypatch.setattr(_tpu_discovery, "connect", lambda *a, **k: looked_up.append(a))
    stderr = _usage_error(pytester.runpytest(*args))
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
    settings = _settings.read(cli={"tf_devices": "8"}, env=env, ini=ini, ini_path="setup.cfg")
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
    assert not _settings.read(env={"COMPAT_DISTRIBUTE_TPU": ""}, ini={"tpu": ""}).any_given
    # The off switch arrives as False and wins like any value.
    off = _settings.read(cli={"fake_tpu_strict": False}, env=env)
    assert (off.fake_tpu_strict, off.source("fake_tpu_strict")) == (False, "the command line")


def test_xla_flags_device_count_comes_after_the_ini_key():
    xla = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2 --xla_cpu_enable_fast_math=false "
                        "-xla_force_host_platform_device_count=16"}
    settings = _settings.read(env=xla)
    # The last flag wins, as XLA reads them; TensorFlow itself ignores the flag.
    assert settings.tf_devices == 16
    assert settings.source("tf_devices") == (
        "--xla_force_host_platform_device_count in environment variable XLA_FLAGS"
    )
    assert settings.any_given
    assert _settings.read(env=xla, ini={"tf_devices": "4"}).tf_devices == 4
    assert _settings.read(env={"XLA_FLAGS": "--xla_dump_to=/tmp/x"}).tf_devices is None
    assert _settings.from_environment(xla).tf_devices == 16  # TestCase reads it too.


def test_fake_backend_gets_topology_and_strict():
    settings = _settings.read(cli={"fake_tpu_topology": "v4-8", "fake_tpu_strict": True})
    backend = _tpu_backend.choose(settings)
    assert backend.describe() == "fake (v4-8, 4 cores on CPU, strict)"
    resolver = backend.make_resolver()
    assert (resolver.topology_name, resolver.num_cores, resolver.strict) == ("v4-8", 4, True)


def test_host_count_is_read_in_precedence_order_and_defaults_to_the_topologys_own():
    # No host count: the topology's own, on a one-host slice and on a pod.
    default = _settings.read()
    assert (default.given_hosts, default.fake_tpu_hosts) == (None, 1)
    assert default.source("fake_tpu_hosts") == "the default"
    pod = _settings.read(cli={"fake_tpu_topology": POD})
    assert (pod.given_hosts, pod.fake_tpu_hosts) == (None, POD_HOSTS)
    assert pod.shown("fake_tpu_hosts") == f"--fake-tpu-hosts={POD_HOSTS} (from the default)"
    # Command line > environment variable > ini key; an empty value is not set.
    ini = {"fake_tpu_topology": POD, "fake_tpu_hosts": str(POD_HOSTS)}
    env = {"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": "1"}
    from_ini = _settings.read(env={"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": ""}, ini=ini)
    assert (from_ini.fake_tpu_hosts, from_ini.source("fake_tpu_hosts")) == (
        POD_HOSTS,
        "ini key fake_tpu_hosts",
    )
    from_env = _settings.read(env=env, ini=ini)
    assert (from_env.fake_tpu_hosts, from_env.source("fake_tpu_hosts")) == (
        1,
        "environment variable COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS",
    )
    from_cli = _settings.read(cli={"fake_tpu_hosts": f" 0{POD_HOSTS} "}, env=env, ini=ini)
    assert (from_cli.fake_tpu_hosts, from_cli.source("fake_tpu_hosts")) == (
        POD_HOSTS,
        "the command line",
    )
    assert from_cli.any_given
    # 1 fits every preset; the environment is the TestCase's way in.
    one_host = {"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": "1"}
    assert _settings.from_environment(one_host).fake_tpu_hosts == 1
    one_host["COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY"] = POD
    assert _settings.from_environment(one_host).fake_tpu_hosts == 1


def test_a_host_count_is_bounded_and_must_fit_the_topology():
    # A count of a thousand digits is refused without being converted.
    with pytest.raises(_settings.SettingError) as raised:
        _settings.read(cli={"fake_tpu_hosts": "9" * 1000})
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
        with pytest.raises(_settings.SettingError) as raised:
            _settings.from_environment(env)
        message = str(raised.value)
        assert message == (
            f"--fake-tpu-hosts={hosts} (from environment variable "
            f"COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS) does not fit --fake-tpu-topology={topology} "
            f"(from environment variable COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY): "
            f"{_fake_refuses(topology, hosts)} Leave --fake-tpu-hosts unset (None) for the "
            f"topology's own count."
        )
        assert f"hosts must be None or {accepted}" in message
        assert "pick a pod preset (v2-32, v3-32," in message


def test_fake_backend_gets_the_host_count():
    one_host = _tpu_backend.choose(
        _settings.read(cli={"fake_tpu_topology": POD, "fake_tpu_hosts": "1"})
    )
    assert one_host.describe() == f"fake ({POD} on 1 host, {POD_CORES} cores on CPU)"
    # Its cores are this process's devices: the plugin creates them.
    assert (one_host.hosts, one_host.local_cores) == (1, POD_CORES)
    for given in (None, str(POD_HOSTS)):  # The full count is the default's pod.
        pod = _tpu_backend.choose(
            _settings.read(cli={"fake_tpu_topology": POD, "fake_tpu_hosts": given})
        )
        assert pod.describe() == f"fake ({POD}, {POD_CORES} cores on {POD_HOSTS} host processes)"
        assert (pod.hosts, pod.local_cores) == (POD_HOSTS, 0)
    v3_8 = _tpu_backend.choose(_settings.read(cli={"fake_tpu_hosts": "1"}))
    assert v3_8.describe() == DEFAULT_FAKE + ")"


def test_a_pod_on_one_host_shows_in_the_header_and_needs_its_cores_as_devices(pytester):
    args = (f"--fake-tpu-topology={POD}", "--fake-tpu-hosts=1")
    result = pytester.runpytest("--collect-only", *args)
    result.stdout.fnmatch_lines(
        [f"compat_distribute: tpu=fake ({POD} on 1 host, {POD_CORES} cores on CPU), "
         "tf-devices=as the tests need"]
    )
    stderr = _usage_error(pytester.runpytest(*args, "--tf-devices=8"))
    assert (
        f"ERROR: --tf-devices=8 (from the command line) is fewer devices than the {POD_CORES} "
        f"cores of the fake TPU's topology {POD} (from the command line) with "
        f"--fake-tpu-hosts=1 (from the command line), which needs one device per core. Pass "
        f"--tf-devices={POD_CORES} or more, or a topology of at most 8 cores: "
    ) in stderr
    assert f", or --fake-tpu-hosts={POD_HOSTS} (its cores on host processes).\n" in stderr


@pytest.mark.parametrize(
    "args, env, source",
    [
        ([f"--tf-devices={DEFAULT_CORES // 2}"], {}, "the command line"),
        ([f"--tf-devices={DEFAULT_CORES // 2}", "--tpu=auto"], {}, "the command line"),
        (
            [],
            {"XLA_FLAGS": f"--xla_force_host_platform_device_count={DEFAULT_CORES // 2}"},
            "--xla_force_host_platform_device_count in environment variable XLA_FLAGS",
        ),
    ],
    ids=["fake", "auto-finds-no-tpu", "xla-flags"],
)
def test_fewer_devices_than_the_fake_has_cores_is_a_usage_error(pytester, monkeypatch, args,
                                                                  env, source):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile("def test_never_runs():\n    raise AssertionError('ran')\n")
    stderr = _usage_error(pytester.runpytest(*args))
    fewer = DEFAULT_CORES // 2
    fitting = " or ".join(
        f"--fake-tpu-topology={name}"
        for name, mesh in TOPOLOGIES.items()
        if math.prod(mesh) <= fewer
    )
    assert fitting  # v4-8's 4 cores fit in half of the default's 8.
    assert (
        f"ERROR: --tf-devices={fewer} (from {source}) is fewer devices than the "
        f"{DEFAULT_CORES} cores of the fake TPU's topology {DEFAULT_TOPOLOGY} (from the "
        f"default), which needs one device per core. Pass --tf-devices={DEFAULT_CORES} or "
        f"more, or a topology of at most {fewer} cores: {fitting}.\n"
    ) in stderr


def test_more_devices_than_the_fake_has_cores_is_fine(pytester):
    # More devices than cores: mirrored gets them all, the fake its cores.
    result = pytester.runpytest("--collect-only", "--fake-tpu-topology=v4-8", "--tf-devices=8")
    result.stdout.fnmatch_lines(["compat_distribute: tpu=fake (v4-8, 4 cores on CPU), tf-devices=8"])
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


# --------------------------------------------------------------------------
# Real TPUs: none here, so only the paths that find none can run.


def test_named_tpu_that_is_not_reachable_fails_the_session(pytester):
    pytester.makepyfile("def test_never_runs():\n    raise AssertionError('ran')\n")
    start = time.monotonic()
    stderr = _usage_error(pytester.runpytest("--tpu=nonexistent-tpu"))
    assert time.monotonic() - start < 30
    assert (
        "ERROR: --tpu=nonexistent-tpu (from the command line): TPU 'nonexistent-tpu' is not "
        "reachable: URLError: <urlopen error [Errno -2] Name or service not known>" in stderr
    )
    assert "Not falling back to the fake TPU: pass --tpu=fake to use the fake" in stderr


def test_auto_without_a_tpu_picks_the_fake_and_says_so(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.tpu
        def test_needs_tpu():
            raise AssertionError("ran on the fake")
        """)
    result = pytester.runpytest("--tpu=auto", "-rs")
    result.stdout.fnmatch_lines(
        [
            f"compat_distribute: tpu={DEFAULT_FAKE}; auto: no TPU here), "
            "tf-devices=as the tests need",
            "SKIPPED [[]1[]] test_auto_without_a_tpu_picks_the_fake_and_says_so.py:*: needs a "
            f"real TPU; the TPU here is {DEFAULT_FAKE}; "
            "auto: no TPU here) (--tpu=auto, from the command line)",
        ]
    )
    result.assert_outcomes(skipped=1)


def test_tpu_connect_timeout_reports_where_it_blocked():
    # TensorFlow's connect is replaced by a call that blocks: what is tested is
    # the deadline and the report, which a real hung TPU would hit the same way.
    release = threading.Event()

    def hanging_connect_and_initialize(name):
        release.wait(10)

    settings = _settings.read(cli={"tpu": "stuck-tpu"})
    start = time.monotonic()
    with pytest.raises(_tpu_backend.TPUUnreachableError) as raised:
        _tpu_backend.choose(settings, timeout=0.3, connect_fn=hanging_connect_and_initialize)
    elapsed = time.monotonic() - start
    release.set()
    assert 0.3 <= elapsed < 2
    message = str(raised.value)
    assert message.startswith("TPU 'stuck-tpu' did not connect and initialise within 0.3 s.")
    assert "in hanging_connect_and_initialize\n    release.wait(10)" in message


# --------------------------------------------------------------------------
# Devices, strategies and markers in a fresh process.

_PROJECT_TESTS = """
import os

import pytest
import tensorflow as tf

OUT = {out!r}


def _all_reduce_of_replica_ids(strategy):
    def step():
        ctx = tf.distribute.get_replica_context()
        return tf.cast(ctx.replica_id_in_sync_group, tf.int32) + 1

    @tf.function  # TPUStrategy.run, real or fake, refuses pure eager functions.
    def all_reduce():
        return strategy.reduce("SUM", strategy.run(step), axis=None)

    return int(all_reduce())


def test_strategy(strategy, request):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    cpus = len(tf.config.list_logical_devices("CPU"))
    n = strategy.num_replicas_in_sync
    with open(os.path.join(OUT, f"{{request.node.callspec.id}}.txt"), "w") as f:
        f.write(f"{{worker}} {{cpus}} {{n}} {{_all_reduce_of_replica_ids(strategy)}}")


@pytest.mark.multi_device(2)
def test_multi_device(strategy):
    assert strategy.num_replicas_in_sync >= 2


@pytest.mark.multi_device(16)
def test_sixteen_devices():
    raise AssertionError("ran with too few devices")


@pytest.mark.tpu
def test_real_tpu(tpu_strategy):
    raise AssertionError("ran on the fake")


@pytest.mark.multi_worker
def test_multi_worker_without_count():
    pass


@pytest.mark.multi_worker(2)
def test_multi_worker_with_count():
    pass


@pytest.mark.multi_worker("two")
def test_multi_worker_bad_count():
    pass
"""


def test_devices_strategies_and_markers_under_xdist(pytester, monkeypatch):
    out = pytester.mkdir("out")
    pytester.makepyfile(test_project=_PROJECT_TESTS.format(out=str(out)))
    # The command line wins over the environment, which wins over the ini file:
    # neither losing value is even read (both would be errors).
    pytester.makeini("[pytest]\ntf_devices = bogus\nfake_tpu_topology = v4-8\n")
    monkeypatch.setenv("COMPAT_DISTRIBUTE_TF_DEVICES", "none")
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY", "v2-8")
    result = pytester.runpytest_subprocess(
        "--tf-devices=8", "-n", "2", "-rsE", "--strict-markers", timeout=180
    )
    result.stdout.fnmatch_lines(
        ["compat_distribute: tpu=fake (v2-8, 8 cores on CPU), tf-devices=8"]
    )
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED [[]1[]] test_project.py:*: multi_device(2): needs 2 replicas; "
            "strategy 'default' has 1 replica(s)",
            "SKIPPED [[]1[]] test_project.py:*: multi_device(16): needs 16 replicas; there "
            "are 8 logical CPU device(s) (set more with --tf-devices)",
            "SKIPPED [[]1[]] test_project.py:*: needs a real TPU; the TPU here is fake (v2-8, "
            "8 cores on CPU) (--tpu=fake, from the default)",
            "@pytest.mark.multi_worker(n): n must be a positive int; got 'two' in "
            "test_project.py::test_multi_worker_bad_count. Write e.g. @pytest.mark.multi_worker(2).",
        ]
    )
    result.assert_outcomes(passed=7, skipped=3, errors=1)
    # One body, three strategies: (worker, logical CPUs, replicas, sum of replica ids + 1).
    runs = {p.stem: p.read_text().split() for p in out.iterdir()}
    assert sorted(runs) == ["default", "mirrored", "tpu"]
    assert {run[0] for run in runs.values()} <= {"gw0", "gw1"}
    assert [runs[k][1:] for k in ("default", "mirrored", "tpu")] == [
        ["8", "1", "1"],
        ["8", "8", "36"],
        ["8", "8", "36"],
    ]


# Without a device count the tests say what they need: the fake's cores (any
# test using a strategy fixture) and the largest multi_device(n), here more.
_MARKED = DEFAULT_CORES + 4
_MARKED_FIRST = f"""
import pytest
import tensorflow as tf


@pytest.mark.multi_device({_MARKED})
def test_marked():
    assert len(tf.config.list_logical_devices("CPU")) == {_MARKED}


def test_tpu_strategy(tpu_strategy):
    assert len(tf.config.list_logical_devices("CPU")) == {_MARKED}
    assert tpu_strategy.num_replicas_in_sync == {DEFAULT_CORES}
"""
_FIXTURE_FIRST = f"""
import pytest
import tensorflow as tf


def test_mirrored(strategy):
    assert len(tf.config.list_logical_devices("CPU")) == {_MARKED}
    replicas = {{"default": 1, "mirrored": {_MARKED}, "tpu": {DEFAULT_CORES}}}
    assert strategy.num_replicas_in_sync == replicas[strategy_name(strategy)]


def strategy_name(strategy):
    name = type(strategy).__name__
    return "mirrored" if name == "MirroredStrategy" else "tpu" if "TPU" in name else "default"


@pytest.mark.multi_device({_MARKED})
def test_marked():
    assert len(tf.config.list_logical_devices("CPU")) == {_MARKED}
"""
_DEVICES_LINE = (
    f"compat_distribute: {_MARKED} logical CPU devices, as the tests need (the largest "
    f"multi_device(n) is {_MARKED}; the fake TPU has {DEFAULT_CORES} cores)"
)


@pytest.mark.parametrize("module", [_MARKED_FIRST, _FIXTURE_FIRST], ids=["marker", "fixture"])
def test_devices_come_from_the_run_not_from_which_test_is_first(pytester, module):
    pytester.makepyfile(test_order=module)
    result = pytester.runpytest_subprocess("-p", "no:xdist", timeout=180)
    result.stdout.fnmatch_lines([_DEVICES_LINE])
    result.assert_outcomes(passed=2 if module is _MARKED_FIRST else 4)


def test_devices_come_from_the_run_in_every_xdist_worker(pytester):
    # Both orders, and each test checks the count of the worker that runs it.
    pytester.makepyfile(test_marked_first=_MARKED_FIRST, test_fixture_first=_FIXTURE_FIRST)
    result = pytester.runpytest_subprocess("-n", "2", timeout=180)
    result.assert_outcomes(passed=6)


_ONE_HOST_POD = f"""
import os

import tensorflow as tf


def _children():
    mine = str(os.getpid())
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{{name}}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] == mine:
                    found.append(int(name))
        except OSError:  # Gone meanwhile.
            pass
    return found


def test_pod_on_one_host(tpu_strategy, tpu_resolver):
    assert (tpu_resolver.topology_name, tpu_resolver.num_hosts) == ("{POD}", 1)
    assert tpu_resolver.pod is None and tpu_resolver.master() == ""
    assert tpu_strategy.num_replicas_in_sync == {POD_CORES}
    extended = tpu_strategy.extended
    assert (extended.num_hosts, extended.num_replicas_per_host) == (1, {POD_CORES})

    @tf.function
    def step():
        def replica():
            context = tf.distribute.get_replica_context()
            return context.all_reduce("SUM", context.replica_id_in_sync_group)

        return tpu_strategy.run(replica)

    summed = [int(v) for v in tpu_strategy.experimental_local_results(step())]
    assert summed == [{sum(range(POD_CORES))}] * {POD_CORES}
    # The cores are this process's virtual devices; no host process started.
    assert len(tf.config.list_logical_devices("CPU")) == {POD_CORES}
    assert _children() == []
"""


def test_a_pod_on_one_host_runs_its_replicas_in_the_test_process(pytester):
    pytester.makepyfile(test_pod_on_one_host=_ONE_HOST_POD)
    result = pytester.runpytest_subprocess(
        "-p", "no:xdist", f"--fake-tpu-topology={POD}", "--fake-tpu-hosts=1", timeout=180
    )
    result.stdout.fnmatch_lines(
        [
            f"compat_distribute: tpu=fake ({POD} on 1 host, {POD_CORES} cores on CPU), "
            "tf-devices=as the tests need",
            f"compat_distribute: {POD_CORES} logical CPU devices, as the tests need (the fake "
            f"TPU has {POD_CORES} cores)",
        ]
    )
    result.assert_outcomes(passed=1)


def test_tensorflow_started_during_collection_says_to_pass_the_count(pytester):
    pytester.makepyfile("""
        import pytest
        import tensorflow as tf

        ONE = tf.constant(1.0)  # Starts the runtime at import, with 1 CPU.


        @pytest.mark.multi_device(4)
        def test_marked():
            assert len(tf.config.list_logical_devices("CPU")) >= 4
        """)
    stderr = _usage_error(pytester.runpytest_subprocess("-p", "no:xdist", timeout=180))
    assert (
        "ERROR: the tests need 4 logical CPU devices (the largest multi_device(n) is 4): "
        "set_virtual_devices(4, 'CPU') came too late: TensorFlow's runtime is already "
        "initialised with 1 logical CPU device(s)"
    ) in stderr
    assert (
        "Here TensorFlow started during collection (a test module or conftest.py ran "
        f"TensorFlow at import): pass --tf-devices={DEFAULT_CORES}, which creates the devices "
        "before collection.\n"  # 4 would not hold the fake TPU, should a test use it.
    ) in stderr
    args = ("-p", "no:xdist", f"--tf-devices={DEFAULT_CORES}")
    result = pytester.runpytest_subprocess(*args, timeout=180)
    result.assert_outcomes(passed=1)


def test_multi_device_past_the_limit_fails_its_test_and_creates_nothing(pytester):
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.multi_device({LIMIT + 1})
        def test_huge():
            raise AssertionError("ran")
        """)
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        f"*@pytest.mark.multi_device(n) in test_multi_device_past_the_limit_fails_its_test_and_"
        f"creates_nothing.py::test_huge: n must be at most {LIMIT} (compat_distribute.testing."
        f"devices.MAX_DEVICES, the most virtual devices one process gets); got {LIMIT + 1}. Ask*"
    ])
    assert "logical CPU devices, as the tests need" not in result.stdout.str()


def test_a_marker_with_more_than_a_count_fails_its_test(pytester):
    # multi_device(2, 3) used to run as multi_device(2), the 3 ignored.
    pytester.makepyfile("""
        import pytest

        @pytest.mark.multi_device(2, 3)
        def test_two_counts():
            raise AssertionError("ran")

        @pytest.mark.multi_worker(devices=2)
        def test_unknown_keyword():
            raise AssertionError("ran")
        """)
    result = pytester.runpytest("-p", "no:xdist")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines_random([
        "@pytest.mark.multi_device(n) takes one count, n; got multi_device(2, 3) in "
        "test_a_marker_with_more_than_a_count_fails_its_test.py::test_two_counts. Write e.g. "
        "@pytest.mark.multi_device(2).",
        "@pytest.mark.multi_worker(n) takes one count, n; got multi_worker(devices=2) in "
        "test_a_marker_with_more_than_a_count_fails_its_test.py::test_unknown_keyword. Write "
        "e.g. @pytest.mark.multi_worker(2).",
    ])


def test_items_of_other_plugins_count_for_markers_only(pytester):
    # An item without fixtures (as a linter's or a data file's) must not break
    # the count; its multi_device marker still counts.
    pytester.makeconftest("""
        import pytest

        class CheckItem(pytest.Item):
            def runtest(self):
                assert self.path.read_text() == "ok\\n"

        class CheckFile(pytest.File):
            def collect(self):
                item = CheckItem.from_parent(self, name="check")
                item.add_marker(pytest.mark.multi_device(2))
                yield item

        def pytest_collect_file(file_path, parent):
            if file_path.suffix == ".check":
                return CheckFile.from_parent(parent, path=file_path)
        """)
    pytester.path.joinpath("data.check").write_text("ok\n")
    result = pytester.runpytest()  # 2 devices: the 8 of this session's runtime suffice.
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["compat_distribute: 2 logical CPU devices, as the tests need (the largest "
         "multi_device(n) is 2)"]
    )


def test_no_option_leaves_tensorflow_alone(pytester):
    pytester.makepyfile("""
        def test_runtime_untouched():
            from tensorflow.python.eager import context

            ctx = context.context_safe()
            assert ctx is None or ctx._context_handle is None, "runtime started"
            assert ctx is None or not ctx._virtual_device_map, "virtual devices configured"
        """)
    result = pytester.runpytest_subprocess("-v", timeout=120)
    result.assert_outcomes(passed=1)
    assert "compat_distribute:" not in result.stdout.str()  # No header line either.


# --------------------------------------------------------------------------
# The session's local cluster, in this session.


def worker_facts():
    """Runs in each worker of the cluster."""
    strategy = cluster_lib.worker_strategy()

    @tf.function
    def all_reduce():
        return strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)

    return cluster_lib.current_task(), strategy.num_replicas_in_sync, float(all_reduce())


@pytest.mark.multi_worker(2)
def test_local_cluster_fixture_runs_in_two_workers(local_cluster):
    assert local_cluster.run(worker_facts) == [(("worker", 0), 2, 2.0), (("worker", 1), 2, 2.0)]
