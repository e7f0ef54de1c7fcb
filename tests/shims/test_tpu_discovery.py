"""The one TPU discovery: the "auto" rule, TPUStrategy without a TPU, ending a process.

This machine has no TPU: the tests assert what "no TPU" gives. Connecting to
a real TPU is covered by smoke/test_cli.py (an address that does not answer) and
plugin/test_plugin_backend.py (a connect that hangs past its deadline).
"""

import os
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute import _tpu_discovery
from compat_distribute.testing import _backend

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(name="no_tpu_in_environment")
def no_tpu_in_environment_fixture(monkeypatch):
    for name in ("TPU_NAME", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def test_tpu_strategy_on_this_hosts_tpu_without_one_says_use_the_fake(no_tpu_in_environment):
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
    with pytest.raises(_tpu_discovery.TPUUnreachableError) as raised:
        compat_distribute.TPUStrategy(resolver, steps_per_run=2)
    assert str(raised.value) == (
        "no TPU found: the TPUClusterResolver finds no TPU core (with tpu='local', "
        "none is attached to this host). To run TPU code without a TPU, use the fake: "
        "wrap it in `with compat_distribute.testing.fake_tpu(): ...`, or run "
        "`compat-distribute smoke --tpu=fake`."
    )


def test_tpu_strategy_without_a_resolver_or_a_tpu_named_says_use_the_fake(
    no_tpu_in_environment,
):
    # TF's text was "Please provide a TPU Name to connect to.", from its TPU client.
    with pytest.raises(_tpu_discovery.TPUUnreachableError) as raised:
        compat_distribute.TPUStrategy(steps_per_run=2)
    assert str(raised.value) == (
        "no TPU found: TPUStrategy() without a resolver uses the TPU named by the "
        "environment (TPU_NAME, KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS or TPU_CONFIG), and none "
        "is set. Pass tpu_cluster_resolver=tf.distribute.cluster_resolver."
        "TPUClusterResolver(tpu=NAME) (tpu='local' on a TPU VM). To run TPU code without "
        "a TPU, use the fake: wrap it in `with compat_distribute.testing.fake_tpu(): ...`, "
        "or run `compat-distribute smoke --tpu=fake`."
    )


def test_no_tpu_here_and_auto_chooses_the_fake(no_tpu_in_environment):
    assert _tpu_discovery.tpu_here() is None
    backend = _backend.choose_backend("auto", topology="v4-8")
    assert (backend.kind, backend.num_cores, backend.is_real) == ("fake", 4, False)
    assert backend.describe() == "fake (v4-8, 4 cores on CPU; auto: no TPU here)"


def test_a_tpu_named_by_the_environment_is_what_auto_connects(monkeypatch):
    monkeypatch.setenv("TPU_NAME", "grpc://127.0.0.1:1")
    assert _tpu_discovery.tpu_here() == _tpu_discovery.TPUHere(
        None, "TPU named by the environment"
    )
    calls = []

    def refuse(name):
        calls.append(name)
        raise ConnectionRefusedError("nothing listens")

    with pytest.raises(_tpu_discovery.TPUUnreachableError) as raised:
        _backend.choose_backend("auto", timeout=5, connect_fn=refuse)
    assert calls == [None]  # the resolver reads the name from the environment
    # The variable and its value are named, with the fix.
    assert str(raised.value) == (
        "the TPU named by the environment (TPU_NAME='grpc://127.0.0.1:1') is not reachable: "
        "ConnectionRefusedError: nothing listens. Set TPU_NAME to a reachable TPU (its name, or "
        "grpc://host:port), or unset it: then 'auto' takes this host's own TPU, else the local "
        "GPUs or the fake."
    )


def test_end_process_runs_atexit_clean_up_and_keeps_the_exit_status(tmp_path):
    marker = tmp_path / "cleaned"
    code = f"""
        import atexit, sys
        from compat_distribute import _exit
        atexit.register(lambda: open({str(marker)!r}, "w").write("cleaned"))
        sys.stdout.write("report")
        _exit.end_process(3)
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=REPO),
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (3, "report", "")
    assert marker.read_text() == "cleaned"
