"""Every job TensorFlow knows: chief, worker, ps and evaluator, each task with
the TF_CONFIG TensorFlow's own resolver reads; parameter-server training with
a ClusterCoordinator, through a worker's preemption."""

import json
import time

import cluster_tasks as tasks
import pytest
from cluster_checks import assert_no_leaks

from compat_distribute.testing.cluster import local_cluster
from support.load import bound


@pytest.mark.multi_worker(4)
def test_each_job_gets_its_tf_config_and_parameter_server_training_survives_a_lost_worker(capfd):
    c = local_cluster(1, has_chief=True, ps=1, evaluator=True, timeout=120, auto_restart=True)
    c.start()
    try:
        assert c.task_names == ["chief 0", "worker 0", "ps 0", "evaluator 0"]
        spec = c.cluster_spec
        assert sorted(spec) == ["chief", "ps", "worker"]  # The evaluator stays outside.
        infos = c.run(tasks.task_info, "jobs")
        assert [json.loads(i["tf_config"]) for i in infos] == [
            {"cluster": {job: list(a) for job, a in spec.items()}, "task": {"type": t, "index": 0}, "rpc_layer": "grpc"}
            for t in ("chief", "worker", "ps", "evaluator")
        ]
        # TensorFlow's own resolver reads them, no relabelling.
        assert c.run(tasks.job_facts) == [
            (job, 0, ["chief", "ps", "worker"]) for job in ("chief", "worker", "ps", "evaluator")
        ]
        # ParameterServerStrategy with a ClusterCoordinator on the chief; the
        # worker is killed after 10 steps and comes back (auto_restart) while
        # the coordinator schedules 10 more.
        worker = c.pids[1]
        start = time.monotonic()
        ((before, after, parameter_servers),) = c.run_on(
            "chief", tasks.ps_training_through_a_worker_restart, worker, 10
        )
        assert (before, after, parameter_servers) == (10.0, 20.0, 1)
        assert c.pids[1] != worker and c.running
        assert time.monotonic() - start < bound(60)
        assert (
            f"local_cluster: worker 0 (pid {worker}) was killed by SIGKILL; auto_restart started "
            f"it again as pid {c.pids[1]}." in capfd.readouterr().err
        )
        pids = c.pids
    finally:
        c.stop()
    assert_no_leaks(pids)
