"""`TF_CONFIG`, the cluster description TensorFlow reads from the environment.

Checked before anything starts, so a typo names the key instead of building a
one-replica strategy. Imports no TensorFlow.
"""

import dataclasses
import json
import os

from compat_distribute import _validate

__all__ = ("ENV_VAR", "RPC_LAYERS", "TFConfig", "from_environment", "parse_tf_config")

ENV_VAR = "TF_CONFIG"


_TF_CONFIG_KEYS = (
    "cluster",
    "task",
    "rpc_layer",
    "environment",
    # Read by tf.estimator's RunConfig; harmless elsewhere.
    "session_master",
    "eval_session_master",
    "model_dir",
)


@dataclasses.dataclass(frozen=True)
class TFConfig:
    """A validated `TF_CONFIG`: the cluster, this process's task, the RPC layer."""

    cluster: dict[str, tuple[str, ...]]
    task_type: str | None = None
    task_id: int | None = None
    rpc_layer: str | None = None
    environment: str | None = None

    def to_json(self) -> str:
        config = {"cluster": {job: list(addrs) for job, addrs in self.cluster.items()}}
        if self.task_type is not None:
            config["task"] = {"type": self.task_type, "index": self.task_id}
        if self.rpc_layer is not None:
            config["rpc_layer"] = self.rpc_layer
        if self.environment is not None:
            config["environment"] = self.environment
        return json.dumps(config)


# The RPC layers TensorFlow's servers speak (TF 2.x builds gRPC alone in).
RPC_LAYERS = ("grpc",)
# Jobs of one task at most (TensorFlow's multi_worker_util says so for both).
_SINGLE_TASK_JOBS = ("chief", "evaluator")

# What TF_CONFIG holds, for the errors about a value that holds nothing.
_ACCEPTED = (
    'a JSON object such as {"cluster": {"worker": ["host1:port", "host2:port"]}, '
    '"task": {"type": "worker", "index": 0}}'
)


def _bad_tf_config(where, problem):
    return ValueError(f"TF_CONFIG{where} {problem}")


def parse_tf_config(text) -> TFConfig:
    """Parses and validates the text of a `TF_CONFIG` environment variable.

    Accepts `{"cluster": {job: ["host:port", ...]}, "task": {"type": job,
    "index": i}, "rpc_layer": "grpc"}` (task and rpc_layer optional; an
    "evaluator" task may sit outside the cluster, as TF expects).

    Raises:
        TypeError: `text` is not a str.
        ValueError: the JSON is malformed (with its position) or a key is wrong;
            the message names the key, e.g. `TF_CONFIG['task']['index']`.
    """
    if not isinstance(text, (str, bytes)):
        raise TypeError(f"TF_CONFIG must be a JSON string; got {_validate.show(text)}.")
    if not text.strip():
        # TensorFlow's resolver would raise a bare JSONDecodeError.
        raise ValueError(
            f"TF_CONFIG is set but empty ({text!r}); it must hold {_ACCEPTED}. Set it so, "
            f"or unset it (e.g. `unset TF_CONFIG`, or del os.environ['TF_CONFIG']) to run "
            f"one worker on its own."
        )
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"TF_CONFIG is not valid JSON: {e.msg} at line {e.lineno} column "
            f"{e.colno} (char {e.pos}) in {text!r}."
        ) from None
    if not isinstance(config, dict):
        raise _bad_tf_config("", f"must be a JSON object; got {_validate.show(config)}.")
    unknown = sorted(set(config) - set(_TF_CONFIG_KEYS))
    if unknown:
        raise _bad_tf_config(
            f"[{unknown[0]!r}]",
            f"is not a TF_CONFIG key; the keys are {', '.join(_TF_CONFIG_KEYS)}.",
        )

    raw_cluster = config.get("cluster", {})
    if not isinstance(raw_cluster, dict):
        raise _bad_tf_config(
            "['cluster']",
            f"must be an object mapping each job name to a list of 'host:port' "
            f"strings; got {_validate.show(raw_cluster)}.",
        )
    cluster = {}
    for job, addrs in raw_cluster.items():
        where = f"['cluster'][{job!r}]"
        if not isinstance(addrs, list) or not addrs:
            raise _bad_tf_config(
                where,
                f"must be a non-empty list of 'host:port' strings; got {_validate.show(addrs)}.",
            )
        for i, addr in enumerate(addrs):
            host, sep, port = addr.rpartition(":") if isinstance(addr, str) else ("", "", "")
            if not (host and sep and port.isdigit() and int(port) <= 65535):
                raise _bad_tf_config(
                    f"{where}[{i}]",
                    f"must be a 'host:port' string with a port in 0..65535; got {_validate.show(addr)}.",
                )
        cluster[job] = tuple(addrs)
    _check_cluster(cluster)

    task_type = task_id = None
    if "task" in config:
        task = config["task"]
        if not isinstance(task, dict):
            raise _bad_tf_config(
                "['task']",
                f"must be an object {{'type': job, 'index': int}}; got {_validate.show(task)}.",
            )
        if "type" not in task:
            raise _bad_tf_config("['task']['type']", f"is missing; got task {task!r}.")
        task_type = task["type"]
        jobs = ", ".join(repr(j) for j in cluster) or "none"
        if not isinstance(task_type, str) or (
            task_type not in cluster and task_type != "evaluator"
        ):
            raise _bad_tf_config(
                "['task']['type']",
                f"must name a job of TF_CONFIG['cluster'] (jobs: {jobs}); got {_validate.show(task_type)}.",
            )
        task_id = task.get("index", 0)
        size = len(cluster.get(task_type, ("evaluator",)))
        if isinstance(task_id, bool) or not isinstance(task_id, int) or not 0 <= task_id < size:
            raise _bad_tf_config(
                "['task']['index']",
                f"must be an int in 0..{size - 1} (job {task_type!r} has {size} "
                f"task(s)); got {_validate.show(task_id)}.",
            )
        unknown = sorted(set(task) - {"type", "index"})
        if unknown:
            raise _bad_tf_config(
                f"['task'][{unknown[0]!r}]", "is not a task key; the keys are 'type' and 'index'."
            )

    for key in ("rpc_layer", "environment"):
        if key in config and not isinstance(config[key], str):
            raise _bad_tf_config(
                f"[{key!r}]", f"must be a string; got {_validate.show(config[key])}."
            )
    if config.get("rpc_layer", "grpc") not in RPC_LAYERS:
        raise _bad_tf_config(
            "['rpc_layer']",
            f"must be {' or '.join(repr(r) for r in RPC_LAYERS)}, the RPC layer TensorFlow's "
            f"servers speak; got {config['rpc_layer']!r}. Write \"rpc_layer\": \"grpc\", or "
            f"leave it out.",
        )
    return TFConfig(cluster, task_type, task_id, config.get("rpc_layer"), config.get("environment"))


def _check_cluster(cluster):
    """One chief and one evaluator at most; no address given to two tasks."""
    for job in _SINGLE_TASK_JOBS:
        if len(cluster.get(job, ())) > 1:
            raise _bad_tf_config(
                f"[{'cluster'!r}][{job!r}]",
                f"must hold one address: a cluster has one {job} at most; got "
                f"{len(cluster[job])} ({', '.join(repr(a) for a in cluster[job])}). Name the "
                f"others' job 'worker'.",
            )
    seen = {}
    for job, addresses in cluster.items():
        for index, address in enumerate(addresses):
            where = f"['cluster'][{job!r}][{index}]"
            if address in seen:
                raise _bad_tf_config(
                    where,
                    f"is {address!r}, the address of TF_CONFIG{seen[address]} too; each task "
                    f"needs an address of its own (its server listens there).",
                )
            seen[address] = where


def from_environment(environ=None) -> TFConfig | None:
    """The parsed `TF_CONFIG` of `environ` (default `os.environ`); None where unset.

    Set but empty or blank raises ValueError, as TensorFlow's resolver fails on
    it (with a bare JSONDecodeError).
    """
    environ = os.environ if environ is None else environ
    return parse_tf_config(environ[ENV_VAR]) if ENV_VAR in environ else None
