"""What a test sees of its tasks: their output streamed live behind a
`[worker-1] ` prefix, every log kept after a fault (the error says where), a
hint when a test module's top level ran TensorFlow in the tasks, and the
environment a hook gives each task."""

import os
import re

import cluster_module_op
import cluster_tasks as tasks
import pytest
from cluster_checks import wait_for

from compat_distribute.testing.cluster import ClusterTaskError
from compat_distribute.testing.cluster import local_cluster


@pytest.mark.multi_worker(2)
def test_output_is_streamed_behind_each_tasks_prefix_and_kept_after_a_fault(capsys, temp_dir):
    c = local_cluster(2, timeout=60, stream_output=True).start()
    try:
        assert c.run(tasks.print_and_return, "hello there") == ["hello there"] * 2
        seen = []
        assert wait_for(lambda: seen.append(capsys.readouterr().out) or "[worker-1]" in "".join(seen), 5)
        assert "[worker-0] ('worker', 0): hello there\n" in "".join(seen)
        assert "[worker-1] ('worker', 1): hello there\n" in "".join(seen)
        with pytest.raises(ClusterTaskError) as raised:
            c.run(tasks.raise_on_worker_1, "kept")
    finally:
        c.stop()
    error = raised.value
    # The last lines were streamed before the logs moved.
    assert "[worker-1] about to fail\n" in capsys.readouterr().out
    assert str(error).endswith(f"\nEvery task's log is kept in {error.logs}")
    assert os.path.dirname(error.logs) == str(temp_dir)
    assert os.path.basename(error.logs).startswith("local_cluster-logs-")
    assert sorted(os.listdir(error.logs)) == ["worker-0.log", "worker-1.log", "zygote.log"]
    with open(os.path.join(error.logs, "worker-1.log")) as f:
        assert "('worker', 1): hello there\nabout to fail\n" in f.read()
    # The cluster's own directory went; only the kept logs stay.
    assert os.listdir(temp_dir) == [os.path.basename(error.logs)]


@pytest.mark.multi_worker(2)
def test_a_test_modules_top_level_op_gets_a_hint(temp_dir):
    with local_cluster(2, timeout=60) as c:
        with pytest.raises(RuntimeError) as raised:
            c.run(cluster_module_op.replicas)
    assert re.match(
        re.escape("local_cluster: worker ")
        + "[01]"
        + re.escape(
            " raised RuntimeError: Collective ops must be configured at program startup (Hint: "
            "importing 'cluster_module_op' in this task ran TensorFlow at its top level (an op, "
            "a variable or a device query), which starts TensorFlow's runtime before the "
            "function could build its multi-worker strategy. Move that code into a function "
            "(or a fixture), so that the task's first TensorFlow call builds the strategy.). "
            "The cluster was torn down."
        ),
        str(raised.value),
    )


@pytest.mark.multi_worker(2)
def test_each_task_gets_the_environment_its_hook_gives():
    def mark(task_type, task_id):
        return {"CLUSTER_TEST_MARK": f"{task_type}-{task_id}", "CUDA_VISIBLE_DEVICES": str(task_id % 2)}

    with local_cluster(1, has_chief=True, timeout=60, task_env=mark) as c:
        assert [r["env_mark"] for r in c.run(tasks.task_info, "hook")] == ["chief-0", "worker-0"]
        # Variables read at import differ between the tasks: each is a fresh process.
        assert c.zygote_pid is None


@pytest.mark.parametrize(
    "hook, error, message",
    [
        ("CUDA_VISIBLE_DEVICES=0", TypeError, r"task_env must be None or a callable \(task_type, task_id\) -> dict of str -> str; got 'CUDA_VISIBLE_DEVICES=0' \(str\)\."),
        (lambda t, i: {"GPU": i}, TypeError, r"task_env\('worker', 0\) returned \{'GPU': 0\} \(dict\): env must map str -> str; env\['GPU'\] = 0 \(int\)\."),
        (lambda t, i: {"TF_CONFIG": "{}"}, ValueError, r"task_env\('worker', 0\) returned .*: env\['TF_CONFIG'\] is set, but local_cluster writes TF_CONFIG"),
    ],
)
def test_a_bad_task_env_hook_is_refused_naming_the_task(hook, error, message):
    with pytest.raises(error, match=message):
        local_cluster(2, task_env=hook)
