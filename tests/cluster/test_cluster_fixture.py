"""The plugin's `local_cluster` fixture: sized by the test's marker, and
replaced after a fault, so that a failing test fails alone. Each test runs a
pytest session of its own in a subprocess."""

import re
import textwrap

import pytest

pytest_plugins = ["pytester"]

_TASKS = """\
import pytest
from compat_distribute.testing import cluster


def task():
    return cluster.current_task()


def fail_in_worker_1():
    if cluster.current_task() == ("worker", 1):
        raise ValueError("broken on purpose")
    return "fine"
"""


def _session(pytester, tests, *args):
    pytester.makepyfile(test_cascade=_TASKS + textwrap.dedent(tests))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", *args)


@pytest.mark.multi_worker(4)
def test_a_failing_test_fails_alone_and_each_test_gets_the_size_it_asks_for(pytester):
    result = _session(
        pytester,
        """
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
        """,
        "-v",
    )
    result.assert_outcomes(failed=1, passed=6)
    result.stdout.fnmatch_lines(
        [
            "*test_fails FAILED*",
            "E  *ClusterTaskError?ValueError?: local_cluster: worker 1 raised ValueError: broken on purpose*",
        ]
    )
    assert "torn down after a fault" not in result.stdout.str()


@pytest.mark.multi_worker(2)
def test_a_healthy_cluster_is_reused_and_a_dead_task_gets_a_fresh_one(pytester):
    result = _session(
        pytester,
        """
        import os, signal, time

        PIDS = []


        def test_first(local_cluster):
            PIDS.append(local_cluster.pids)


        def test_reuses_it(local_cluster):
            assert local_cluster.pids == PIDS[0]
            os.kill(local_cluster.pids[1], signal.SIGKILL)
            deadline = time.monotonic() + 10  # SIGKILL takes effect soon, not at once.
            while local_cluster.running and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not local_cluster.running


        def test_replaces_the_one_with_a_dead_task(local_cluster):
            assert local_cluster.running
            assert set(local_cluster.pids).isdisjoint(PIDS[0])
            assert local_cluster.run(task) == [("worker", 0), ("worker", 1)]
        """,
    )
    result.assert_outcomes(passed=3)


def test_a_bad_marker_keyword_fails_its_test(pytester):
    result = _session(
        pytester,
        """
        @pytest.mark.multi_worker(2, has_chief="yes")
        def test_bad_chief(local_cluster):
            raise AssertionError("ran")
        """,
    )
    result.assert_outcomes(errors=1)
    assert re.search(
        r"@pytest.mark.multi_worker\(has_chief=\.\.\.\) must be True or False; got 'yes' in "
        r"test_cascade.py::test_bad_chief\. Write e\.g\. @pytest.mark.multi_worker\(2, "
        r"has_chief=True\)\.",
        result.stdout.str(),
    )
