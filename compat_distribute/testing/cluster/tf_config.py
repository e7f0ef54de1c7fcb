"""The cluster's shape and the `TF_CONFIG` each task is given.

Internal: not part of the public API; the names below may change.

Parsing and validating `TF_CONFIG` is the core's (`compat_distribute._tf_config`);
this module builds it for the tasks of a local cluster.
"""

from compat_distribute._tf_config import TFConfig

__all__ = ["SERVING_JOBS", "cluster_spec", "for_task", "in_cluster_spec", "task_keys", "task_name"]

# The jobs whose tasks run a server that a coordinator (the chief) drives, in
# parameter-server training.
SERVING_JOBS = ("worker", "ps")


def task_keys(num_workers, has_chief=False, ps=0, evaluator=False):
    """(task_type, task_id) of every task, in result order: chief, workers,
    parameter servers, evaluator (the order of TensorFlow's own test clusters)."""
    keys = [("chief", 0)] if has_chief else []
    keys += [("worker", i) for i in range(num_workers)]
    keys += [("ps", i) for i in range(ps)]
    return keys + ([("evaluator", 0)] if evaluator else [])


def task_name(task_type, task_id):
    return f"{task_type} {task_id}"


def in_cluster_spec(keys):
    """The tasks of `keys` that the cluster spec names: all but the evaluator,
    which TensorFlow keeps outside the cluster (it trains nothing, and a
    parameter-server coordinator would wait for it to serve)."""
    return [key for key in keys if key[0] != "evaluator"]


def cluster_spec(keys, ports):
    """{job: ("127.0.0.1:port", ...)} for the tasks `keys` listening on `ports`."""
    spec = {}
    for (task_type, _), port in zip(keys, ports):
        spec.setdefault(task_type, []).append(f"127.0.0.1:{port}")
    return {job: tuple(addresses) for job, addresses in spec.items()}


def for_task(spec, task_type, task_id) -> TFConfig:
    """The `TF_CONFIG` of one task of the cluster `spec`."""
    return TFConfig(spec, task_type, task_id, rpc_layer="grpc")
