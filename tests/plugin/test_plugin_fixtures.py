"""The plugin's markers and fixtures, in this session (8 logical CPUs)."""

import pytest
import tensorflow as tf

from compat_distribute.testing import cluster as cluster_lib
from plugin_helpers import LIMIT
from plugin_helpers import clean_environment  # noqa: F401  # autouse

pytest_plugins = ["pytester"]


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

        @pytest.mark.tpu("x")  # was taken as tpu, the "x" ignored (and skipped on the fake)
        def test_named():
            raise AssertionError("ran")
        """)
    result = pytester.runpytest("-p", "no:xdist")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines_random([
        "@pytest.mark.multi_device(n) takes one count, n; got multi_device(2, 3) in "
        "test_a_marker_with_more_than_a_count_fails_its_test.py::test_two_counts. Write e.g. "
        "@pytest.mark.multi_device(2).",
        "@pytest.mark.multi_worker(n) takes one count, n, and the keywords has_chief, ps and "
        "timeout; got "
        "multi_worker(devices=2) in "
        "test_a_marker_with_more_than_a_count_fails_its_test.py::test_unknown_keyword. Write "
        "e.g. @pytest.mark.multi_worker(2).",
        "@pytest.mark.tpu takes no arguments; got tpu('x') in "
        "test_a_marker_with_more_than_a_count_fails_its_test.py::test_named. Write "
        "@pytest.mark.tpu, and choose the TPU with --tpu (e.g. --tpu=auto, or --tpu=NAME for "
        "a TPU of that name).",
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
