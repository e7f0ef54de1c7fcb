"""The pytest plugin, run on small test projects through pytest's `pytester`.

Runs that configure TensorFlow devices use `runpytest_subprocess` (a fresh
TensorFlow runtime each); runs that change nothing in TensorFlow (bad values,
the header, an unreachable TPU, "auto" without a TPU) run in this process.
"""

import threading
import time

import pytest
import tensorflow as tf

from compat_distribute.testing import _settings
from compat_distribute.testing import _tpu_backend
from compat_distribute.testing import cluster as cluster_lib

pytest_plugins = ["pytester"]

ENV_VARS = tuple(option.env for option in _settings.OPTIONS)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TPU_NAME", raising=False)


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
            "--fake-tpu-topology: expected one of 'v2-8', 'v3-8', 'v4-8', 'v5litepod-1', "
            "'v5litepod-4', 'v5litepod-8', 'v5p-8', 'v6e-1', 'v6e-4', 'v6e-8', got 'v9-1024' "
            "(from environment variable COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY)",
        ),
        (
            [],
            {},
            "fake_tpu_strict = maybe",
            "--fake-tpu-strict: expected one of 1, true, yes, on, 0, false, no, off, "
            "got 'maybe' (from ini key fake_tpu_strict in {ini})",
        ),
    ],
    ids=["cli", "env", "ini", "tpu-name", "topology", "strict"],
)
def test_bad_value_names_its_source(pytester, monkeypatch, args, env, ini, message):
    ini_file = pytester.makeini(f"[pytest]\n{ini}\n")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    stderr = _usage_error(pytester.runpytest(*args))
    assert f"ERROR: {message.format(ini=ini_file)}" in stderr


def test_precedence_command_line_then_environment_then_ini(pytester, monkeypatch):
    # The fake's topology shows in the header; v4-8 has 4 cores, v2-8 and v3-8 have 8.
    pytester.makeini("[pytest]\nfake_tpu_topology = v2-8\n")
    header = "compat_distribute: tpu=fake ({}), tf-devices=not set"

    result = pytester.runpytest("--collect-only")
    result.stdout.fnmatch_lines([header.format("v2-8, 8 cores on CPU")])

    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY", "v4-8")
    result = pytester.runpytest("--collect-only")
    result.stdout.fnmatch_lines([header.format("v4-8, 4 cores on CPU")])

    result = pytester.runpytest("--collect-only", "--fake-tpu-topology=v3-8", "--fake-tpu-strict")
    result.stdout.fnmatch_lines([header.format("v3-8, 8 cores on CPU, strict")])

    # A value that loses is not read, so it cannot fail the session.
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY", "v9-9")
    result = pytester.runpytest("--collect-only", "--fake-tpu-topology=v4-8")
    result.stdout.fnmatch_lines([header.format("v4-8, 4 cores on CPU")])


def test_settings_resolve_in_precedence_order():
    ini = {"tf_devices": "2", "tpu": "auto"}
    env = {"COMPAT_DISTRIBUTE_TF_DEVICES": "4", "COMPAT_DISTRIBUTE_FAKE_TPU_STRICT": "yes"}
    settings = _settings.resolve(cli={"tf_devices": "8"}, env=env, ini=ini, ini_path="setup.cfg")
    assert (settings.tf_devices, settings.tpu, settings.fake_tpu_topology) == (8, "auto", "v3-8")
    assert settings.fake_tpu_strict is True
    assert settings.source("tf_devices") == "the command line"
    assert settings.source("tpu") == "ini key tpu in setup.cfg"
    assert settings.source("fake_tpu_topology") == "the default"
    assert (
        settings.source("fake_tpu_strict")
        == "environment variable COMPAT_DISTRIBUTE_FAKE_TPU_STRICT"
    )
    assert settings.any_given
    assert not _settings.resolve(env={"COMPAT_DISTRIBUTE_TPU": ""}, ini={"tpu": ""}).any_given


def test_fake_backend_gets_topology_and_strict():
    settings = _settings.resolve(cli={"fake_tpu_topology": "v4-8", "fake_tpu_strict": True})
    backend = _tpu_backend.choose(settings)
    assert backend.describe() == "fake (v4-8, 4 cores on CPU, strict)"
    resolver = backend.make_resolver()
    assert (resolver.topology_name, resolver.num_cores, resolver.strict) == ("v4-8", 4, True)


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
            "compat_distribute: tpu=fake (v3-8, 8 cores on CPU; auto: no TPU here), "
            "tf-devices=not set",
            "SKIPPED [[]1[]] test_auto_without_a_tpu_picks_the_fake_and_says_so.py:*: needs a "
            "real TPU; the TPU here is fake (v3-8, 8 cores on CPU; "
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

    settings = _settings.resolve(cli={"tpu": "stuck-tpu"})
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
    pytester.makeini("[pytest]\ntf_devices = bogus\nfake_tpu_topology = v2-8\n")
    monkeypatch.setenv("COMPAT_DISTRIBUTE_TF_DEVICES", "none")
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY", "v3-8")
    result = pytester.runpytest_subprocess(
        "--tf-devices=8", "-n", "2", "-rsE", "--strict-markers", timeout=180
    )
    result.stdout.fnmatch_lines(
        ["compat_distribute: tpu=fake (v3-8, 8 cores on CPU), tf-devices=8"]
    )
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED [[]1[]] test_project.py:*: multi_device(2): needs 2 replicas; "
            "strategy 'default' has 1 replica(s)",
            "SKIPPED [[]1[]] test_project.py:*: multi_device(16): needs 16 replicas; there "
            "are 8 logical CPU device(s) (set more with --tf-devices)",
            "SKIPPED [[]1[]] test_project.py:*: needs a real TPU; the TPU here is fake (v3-8, "
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
