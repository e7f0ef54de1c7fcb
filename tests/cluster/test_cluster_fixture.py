"""The plugin's `local_cluster` fixture: sized by the test's marker, and
replaced after a fault, so that a failing test fails alone. One pytest session
in a subprocess runs the project's tests; each test here checks its part."""

import os
import re
import subprocess
import sys

import pytest

from compat_distribute.testing import deadlines

_TASKS = """\
import os
import signal
import time

import pytest
from compat_distribute.testing import cluster
from compat_distribute.testing import deadlines


def task():
    return cluster.current_task()


def hang():
    time.sleep(600)


def fail_in_worker_1():
    if cluster.current_task() == ("worker", 1):
        raise ValueError("broken on purpose")
    return "fine"
"""


# One session of every project test below: each test here checks its part.
_PROJECT_TESTS = """
@pytest.mark.multi_worker(2)
def test_fails(local_cluster):
    local_cluster.run(fail_in_worker_1)


@pytest.mark.multi_worker(2)
def test_passes_after_it(local_cluster):
    assert local_cluster.run(task) == [("worker", 0), ("worker", 1)]


@pytest.mark.multi_worker(4)
def test_four_workers(local_cluster):
    assert local_cluster.run(task) == [("worker", i) for i in range(4)]
    assert len(set(local_cluster.pids)) == 4


PIDS = []


@pytest.mark.multi_worker(2)
def test_catches_a_tasks_error(local_cluster):
    PIDS.extend(local_cluster.pids)
    with pytest.raises(ValueError, match="worker 1 raised ValueError: broken on purpose"):
        local_cluster.run(fail_in_worker_1)


@pytest.mark.multi_worker(2)
def test_passes_after_the_caught_error(local_cluster):
    assert set(local_cluster.pids).isdisjoint(PIDS)
    assert local_cluster.run(task) == [("worker", 0), ("worker", 1)]


@pytest.mark.multi_worker(1, has_chief=True, ps=1)
def test_a_chief_and_a_parameter_server(local_cluster):
    assert local_cluster.run(task) == [("chief", 0), ("worker", 0), ("ps", 0)]


def test_unmarked_gets_two(local_cluster):
    assert local_cluster.task_names == ["worker 0", "worker 1"]


KEPT = []


def test_first(local_cluster):
    KEPT.append(local_cluster.pids)


def test_reuses_it(local_cluster):
    assert local_cluster.pids == KEPT[0]
    os.kill(local_cluster.pids[1], signal.SIGKILL)
    deadline = time.monotonic() + 10  # SIGKILL takes effect soon, not at once.
    while local_cluster.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not local_cluster.running


def test_replaces_the_one_with_a_dead_task(local_cluster):
    assert local_cluster.running
    assert set(local_cluster.pids).isdisjoint(KEPT[0])
    assert local_cluster.run(task) == [("worker", 0), ("worker", 1)]


@pytest.mark.multi_worker(2, has_chief="yes")
def test_bad_chief(local_cluster):
    raise AssertionError("ran")


@pytest.mark.multi_worker(1, timeout=2)
def test_a_hang_fails_at_the_markers_timeout(local_cluster):
    with pytest.raises(cluster.ClusterTimeoutError) as raised:
        local_cluster.run(hang)
    assert str(raised.value).startswith(
        f"local_cluster: run(test_cascade:hang) did not finish within {deadlines.describe(2)} (timeout)"
    )


@pytest.mark.multi_worker(1, timeout=2)
def test_the_next_test_of_that_timeout_gets_a_fresh_cluster(local_cluster):
    assert local_cluster.run(task) == [("worker", 0)]


@pytest.mark.multi_worker(2, timeout=0)
def test_bad_timeout(local_cluster):
    raise AssertionError("ran")
"""


@pytest.fixture(scope="module", name="session")
def session_fixture(tmp_path_factory):
    """The project's `pytest -v` run: (its output, {test name: PASSED, FAILED or ERROR})."""
    project = tmp_path_factory.mktemp("cascade")
    (project / "test_cascade.py").write_text(_TASKS + _PROJECT_TESTS)
    # A session of its own, also when this test runs in an xdist worker.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(project), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-v",
         "test_cascade.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=deadlines.scaled(600),
    )
    output = result.stdout + result.stderr
    outcomes = dict(re.findall(r"^test_cascade\.py::(\w+) (PASSED|FAILED|ERROR)", result.stdout, re.M))
    return output, outcomes


@pytest.mark.multi_worker(4)
def test_a_failing_test_fails_alone_and_each_test_gets_the_size_it_asks_for(session):
    output, outcomes = session
    ran = ["test_fails", "test_passes_after_it", "test_four_workers", "test_catches_a_tasks_error",
           "test_passes_after_the_caught_error", "test_a_chief_and_a_parameter_server",
           "test_unmarked_gets_two"]
    assert {name: outcomes.get(name) for name in ran} == dict(
        {name: "PASSED" for name in ran}, test_fails="FAILED"), output
    assert re.search(r"^=+ 1 failed, 11 passed, 2 errors in ", output, re.M), output
    pytest.LineMatcher(output.splitlines()).fnmatch_lines(
        [
            "*test_fails FAILED*",
            "E  *ClusterTaskError?ValueError?: local_cluster: worker 1 raised ValueError: broken on purpose*",
        ]
    )
    assert "torn down after a fault" not in output


@pytest.mark.multi_worker(2)
def test_a_healthy_cluster_is_reused_and_a_dead_task_gets_a_fresh_one(session):
    output, outcomes = session
    ran = ["test_first", "test_reuses_it", "test_replaces_the_one_with_a_dead_task"]
    assert {name: outcomes.get(name) for name in ran} == {name: "PASSED" for name in ran}, output


def test_a_bad_marker_keyword_fails_its_test(session):
    output, outcomes = session
    assert outcomes.get("test_bad_chief") == "ERROR", output
    assert re.search(
        r"@pytest.mark.multi_worker\(has_chief=\.\.\.\) must be True or False; got 'yes' in "
        r"test_cascade.py::test_bad_chief\. Write e\.g\. @pytest.mark.multi_worker\(2, "
        r"has_chief=True\)\.",
        output,
    )


def test_a_markers_timeout_bounds_the_fixtures_runs(session):
    output, outcomes = session
    ran = ["test_a_hang_fails_at_the_markers_timeout", "test_the_next_test_of_that_timeout_gets_a_fresh_cluster"]
    assert {name: outcomes.get(name) for name in ran} == {name: "PASSED" for name in ran}, output
    assert outcomes.get("test_bad_timeout") == "ERROR", output
    assert (
        "@pytest.mark.multi_worker(timeout=...) must be a number of seconds > 0, at most 86400; "
        "got 0 in test_cascade.py::test_bad_timeout. Write e.g. @pytest.mark.multi_worker(2, "
        "timeout=30)."
    ) in output
