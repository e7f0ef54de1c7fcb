"""One factor for every deadline given to a child process:
$COMPAT_DISTRIBUTE_TIMEOUT_SCALE, read by the cluster launcher and by the
tests' subprocess helper."""

import subprocess
import sys
import time

import pytest
from cluster_checks import assert_no_leaks

from compat_distribute.testing import deadlines
from compat_distribute.testing.cluster import ClusterTimeoutError
from compat_distribute.testing.cluster import LaunchHooks
from compat_distribute.testing.cluster import local_cluster
from support.load import bound


@pytest.mark.parametrize(
    "value, factor",
    [(None, 1.0), ("", 1.0), ("  ", 1.0), ("3", 3.0), (" 0.5 ", 0.5), ("100", 100.0)],
)
def test_the_factor_is_read_from_the_environment(value, factor):
    environ = {} if value is None else {deadlines.ENV_VAR: value}
    assert deadlines.scale(environ) == factor
    assert deadlines.scaled(20, environ) == 20 * factor


@pytest.mark.parametrize("value", ["0", "-2", "abc", "nan", "inf", "101", "3s"])
def test_a_bad_factor_is_refused_naming_the_variable_and_what_is_accepted(value):
    with pytest.raises(ValueError) as raised:
        deadlines.scale({deadlines.ENV_VAR: value})
    assert str(raised.value) == (
        f"COMPAT_DISTRIBUTE_TIMEOUT_SCALE must be a number > 0 and at most 100; got {value!r}. "
        f"It multiplies every time limit given to a child process (e.g. 3 on a loaded "
        f"machine). Set it so, or unset it for the default (1)."
    )


def test_errors_say_how_the_deadline_was_scaled():
    assert deadlines.describe(6, {}) == "6 s"
    assert deadlines.describe(6, {deadlines.ENV_VAR: "2.5"}) == (
        "15 s (6 s x COMPAT_DISTRIBUTE_TIMEOUT_SCALE=2.5)"
    )


def test_a_bad_factor_fails_local_cluster_before_anything_starts(monkeypatch):
    monkeypatch.setenv(deadlines.ENV_VAR, "-1")
    launched = []
    with pytest.raises(ValueError, match="COMPAT_DISTRIBUTE_TIMEOUT_SCALE must be a number > 0"):
        local_cluster(2, hooks=LaunchHooks(on_launch=lambda name, pid: launched.append(pid)))
    assert launched == []


def _never_starts(spec, argv):
    return [sys.executable, "-c", "import time; time.sleep(600)"]


def test_the_launchers_start_deadline_scales(monkeypatch):
    slack = bound(3.0)  # before the scale below, which is the thing tested
    monkeypatch.setenv(deadlines.ENV_VAR, "3")
    launched = []
    hooks = LaunchHooks(command=_never_starts, on_launch=lambda name, pid: launched.append(pid))
    c = local_cluster(1, start_timeout=1, network="host", hooks=hooks)
    start = time.monotonic()
    with pytest.raises(ClusterTimeoutError) as raised:
        c.start()
    elapsed = time.monotonic() - start
    assert str(raised.value).startswith(
        "local_cluster: worker 0 did not start within 3 s (1 s x "
        "COMPAT_DISTRIBUTE_TIMEOUT_SCALE=3) (start_timeout);"
    )
    assert 3.0 <= elapsed < 3.0 + slack, elapsed
    assert_no_leaks(launched)


def test_the_tests_subprocess_deadline_scales(monkeypatch, run_python):
    monkeypatch.setenv(deadlines.ENV_VAR, "4")
    # 2 s of work within a 1 s limit, scaled to 4 s.
    result = run_python("import time; time.sleep(2); print('done')", timeout=1)
    assert result.stdout == "done\n"
    monkeypatch.setenv(deadlines.ENV_VAR, "0.5")
    with pytest.raises(subprocess.TimeoutExpired, match=r"timed out after 0.5 seconds"):
        run_python("import time; time.sleep(2)", timeout=1)
