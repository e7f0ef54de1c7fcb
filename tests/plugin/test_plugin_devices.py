"""The devices a session creates, in fresh processes: given, or as the collected tests need."""

import pytest

from plugin_helpers import DEFAULT_CORES
from plugin_helpers import clean_environment  # noqa: F401  # autouse
from plugin_helpers import usage_error

from compat_distribute.testing._fake_tpu import PRESETS

pytest_plugins = ["pytester"]

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
    # One xdist worker shows a worker's set-up (the count per worker is the
    # next tests' point): each further worker would import TensorFlow again.
    result = pytester.runpytest_subprocess(
        "--tf-devices=8", "-n", "1", "-rsE", "--strict-markers", timeout=180
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
    assert {run[0] for run in runs.values()} == {"gw0"}
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


def test_devices_come_from_the_run_not_from_which_test_is_first(pytester):
    # In this order the run's first test (test_mirrored[default]) needs none of
    # the marker's devices, and its last (test_tpu_strategy) only the fake's.
    pytester.makepyfile(test_fixture_first=_FIXTURE_FIRST, test_marked_first=_MARKED_FIRST)
    result = pytester.runpytest_subprocess(
        "-p", "no:xdist", "-v", "test_fixture_first.py", "test_marked_first.py", timeout=180
    )
    result.stdout.fnmatch_lines([_DEVICES_LINE])
    ran = [line.split()[0] for line in result.outlines if line.endswith("%]")]
    assert (ran[0], ran[-1]) == (
        "test_fixture_first.py::test_mirrored[default]", "test_marked_first.py::test_tpu_strategy"
    ), ran
    result.assert_outcomes(passed=6)


def test_devices_come_from_the_run_in_every_xdist_worker(pytester):
    # Both orders, and each test checks the count of the worker that runs it.
    pytester.makepyfile(test_marked_first=_MARKED_FIRST, test_fixture_first=_FIXTURE_FIRST)
    result = pytester.runpytest_subprocess("-n", "2", timeout=180)
    result.assert_outcomes(passed=6)


# The smallest pod (2 hosts of 4 cores): its host count is not the point here.
POD = "v4-16"
POD_CORES = PRESETS[POD].cores
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


_STARTS_TENSORFLOW = """
    import tensorflow as tf

    ONE = tf.constant(1.0)  # Starts the runtime at import, with 1 CPU.
    """
_NEEDS_FOUR = """
    import pytest
    import tensorflow as tf


    @pytest.mark.multi_device(4)
    def test_marked():
        assert len(tf.config.list_logical_devices("CPU")) >= 4
    """


# A root conftest.py is imported before pytest_configure: the count advised used to
# fail there in turn, saying the same.
def test_tensorflow_started_during_collection_says_to_pass_the_count(pytester):
    # Started by a test module, then by a root conftest.py: each run stops with the advice.
    pytester.makepyfile(test_module_starts=_STARTS_TENSORFLOW + _NEEDS_FOUR)
    for where, path in [("test module", "test_module_starts.py"),
                        ("root conftest.py", "test_needs_four.py")]:
        if where == "root conftest.py":
            pytester.makeconftest(_STARTS_TENSORFLOW)
            pytester.makepyfile(test_needs_four=_NEEDS_FOUR)
        stderr = usage_error(pytester.runpytest_subprocess("-p", "no:xdist", path, timeout=180))
        assert (
            "ERROR: the tests need 4 logical CPU devices (the largest multi_device(n) is 4): "
            "set_virtual_devices(4, 'CPU') came too late: TensorFlow's runtime is already "
            "initialised with 1 logical CPU device(s)"
        ) in stderr, where
        assert (
            "Here TensorFlow started during collection (a test module or conftest.py ran "
            f"TensorFlow at import): pass --tf-devices={DEFAULT_CORES} (or set it in the ini file, "
            f"or COMPAT_DISTRIBUTE_TF_DEVICES={DEFAULT_CORES}), which creates the devices before "
            "pytest imports any conftest.py or test module.\n"  # 4 would not hold the fake TPU.
        ) in stderr, where
    # The advice works for both at once (the root conftest.py and the module that
    # start TensorFlow); the ini key works as early, and in an xdist worker.
    args = ("-p", "no:xdist", f"--tf-devices={DEFAULT_CORES}")
    result = pytester.runpytest_subprocess(*args, timeout=180)
    result.assert_outcomes(passed=2)
    pytester.makeini(f"[pytest]\ntf_devices = {DEFAULT_CORES}\n")
    result = pytester.runpytest_subprocess("-n", "1", timeout=180)
    result.assert_outcomes(passed=2)


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

