"""The session's TPU: the fake's shape, a real TPU that must be reachable, "auto" without one."""

import math
import threading
import time

import pytest

from compat_distribute import _tpu_discovery
from compat_distribute.testing import _backend
from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY
from compat_distribute.testing._fake_tpu import topologies
from compat_distribute.testing.pytest import options
from plugin_helpers import DEFAULT_CORES
from plugin_helpers import DEFAULT_FAKE
from plugin_helpers import POD
from plugin_helpers import POD_CORES
from plugin_helpers import POD_HOSTS
from plugin_helpers import clean_environment  # noqa: F401  # autouse
from plugin_helpers import usage_error
from support.load import bound

pytest_plugins = ["pytester"]


def test_fake_backend_gets_topology_and_strict():
    settings = options.read(cli={"fake_tpu_topology": "v4-8", "fake_tpu_strict": True})
    backend = _backend.choose(settings)
    assert backend.describe() == "fake (v4-8, 4 cores on CPU, strict)"
    resolver = backend.make_resolver()
    assert (resolver.topology_name, resolver.num_cores, resolver.strict) == ("v4-8", 4, True)

def test_fake_backend_gets_the_host_count():
    one_host = _backend.choose(
        options.read(cli={"fake_tpu_topology": POD, "fake_tpu_hosts": "1"})
    )
    assert one_host.describe() == f"fake ({POD} on 1 host, {POD_CORES} cores on CPU)"
    # Its cores are this process's devices: the plugin creates them.
    assert (one_host.hosts, one_host.local_cores) == (1, POD_CORES)
    for given in (None, str(POD_HOSTS)):  # The full count is the default's pod.
        pod = _backend.choose(
            options.read(cli={"fake_tpu_topology": POD, "fake_tpu_hosts": given})
        )
        assert pod.describe() == f"fake ({POD}, {POD_CORES} cores on {POD_HOSTS} host processes)"
        assert (pod.hosts, pod.local_cores) == (POD_HOSTS, 0)
    v3_8 = _backend.choose(options.read(cli={"fake_tpu_hosts": "1"}))
    assert v3_8.describe() == DEFAULT_FAKE + ")"


def test_a_pod_on_one_host_shows_in_the_header_and_needs_its_cores_as_devices(pytester):
    args = (f"--fake-tpu-topology={POD}", "--fake-tpu-hosts=1")
    result = pytester.runpytest("--collect-only", *args)
    result.stdout.fnmatch_lines(
        [f"compat_distribute: tpu=fake ({POD} on 1 host, {POD_CORES} cores on CPU), "
         "tf-devices=as the tests need"]
    )
    stderr = usage_error(pytester.runpytest(*args, "--tf-devices=8"))
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
def test_fewer_devices_than_the_fake_has_cores_is_ausage_error(pytester, monkeypatch, args,
                                                                  env, source):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile("def test_never_runs():\n    raise AssertionError('ran')\n")
    stderr = usage_error(pytester.runpytest(*args))
    fewer = DEFAULT_CORES // 2
    fitting = " or ".join(
        f"--fake-tpu-topology={name}"
        for name, mesh in topologies.one_host_meshes().items()
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


@pytest.mark.parametrize("args", [["-p", "no:xdist"], ["-n", "2"]], ids=["main", "xdist"])
def test_named_tpu_that_is_not_reachable_fails_the_session(pytester, monkeypatch, args):
    # Under xdist the controller stops the session before any worker starts;
    # it only resolves the name: connecting is for the workers.
    connects = []
    connect = _tpu_discovery.connect
    monkeypatch.setattr(
        _tpu_discovery, "connect", lambda *a, **k: connects.append(a) or connect(*a, **k)
    )
    pytester.makepyfile("def test_never_runs():\n    raise AssertionError('ran')\n")
    start = time.monotonic()
    stderr = usage_error(pytester.runpytest("--tpu=nonexistent-tpu", *args))
    assert time.monotonic() - start < bound(30)
    assert len(connects) == (1 if "no:xdist" in args else 0)
    assert (
        "ERROR: --tpu=nonexistent-tpu (from the command line): TPU 'nonexistent-tpu' is not "
        "reachable: URLError: <urlopen error [Errno -2] Name or service not known>" in stderr
    )
    assert "Not falling back to the fake TPU: pass --tpu=fake to use the fake" in stderr


def test_auto_with_an_unreachable_tpu_named_by_the_environment_says_how_to_change_it(pytester, monkeypatch):
    monkeypatch.setenv("TPU_NAME", "nonexistent-tpu")
    pytester.makepyfile("def test_never_runs(tpu_strategy):\n    raise AssertionError('ran')\n")
    stderr = usage_error(pytester.runpytest("--tpu=auto", "-p", "no:xdist"))
    assert (
        "ERROR: --tpu=auto (from the command line): the TPU named by the environment "
        "(TPU_NAME='nonexistent-tpu') is not reachable: URLError: <urlopen error [Errno -2] Name "
        "or service not known>. Set TPU_NAME to a reachable TPU (its name, or grpc://host:port), "
        "or unset it: then 'auto' takes this host's own TPU, else the local GPUs or the fake.\n"
        "Not falling back to the fake TPU: pass --tpu=fake to use the fake.\n"
    ) in stderr


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

    settings = options.read(cli={"tpu": "stuck-tpu"})
    start = time.monotonic()
    with pytest.raises(_backend.TPUUnreachableError) as raised:
        _backend.choose(settings, timeout=0.3, connect_fn=hanging_connect_and_initialize)
    elapsed = time.monotonic() - start
    release.set()
    assert 0.3 <= elapsed < 0.3 + bound(1.7)
    message = str(raised.value)
    assert message.startswith("TPU 'stuck-tpu' did not connect and initialise within 0.3 s.")
    assert "in hanging_connect_and_initialize\n    release.wait(10)" in message

