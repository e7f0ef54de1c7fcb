"""`tf.contrib` under `install()`: the TF 1.12-1.15 distribution names, as data (`ROUTES`).

TF1 TPU code reached its strategy and resolver through `tf.contrib`, which TF2 lacks.
"""

import dataclasses
import inspect
import types

from compat_distribute import _lazy
from compat_distribute import _validate

_TF = "tensorflow:"  # a target below `tensorflow`, looked up at each access


@dataclasses.dataclass(frozen=True)
class Param:
    """A TF1 constructor parameter that TF2's class lacks or names differently."""

    name: str
    default: object = None
    new: str = ""  # passed on under this name when given
    advice: str = ""  # what to write instead, for any value but the default
    derived: bool = False  # read by the route's `derive`, not passed on itself


@dataclasses.dataclass(frozen=True)
class Route:
    """`tf.contrib.<module>.<name>` -> `target` ("package.module:attr")."""

    module: str  # below tf.contrib: "distribute" or "cluster_resolver"
    name: str
    target: str
    versions: str  # the TensorFlow versions whose tf.contrib had it
    params: tuple = ()  # TF1's parameters in order, where they differ from the target's
    note: str = ""
    # derive(route, given, gpu_count) -> keywords for the target, from the `derived` params
    # (`given`: every TF1 parameter's value; `gpu_count`: the GPUs this process sees)
    derive: object = None

    @property
    def spelling(self):
        return f"tf.contrib.{self.module}.{self.name}"

    @property
    def target_spelling(self):
        module, _, attr = self.target.partition(":")
        # The shims' classes are public at the package's top level.
        return f"tf.{attr}" if module == "tensorflow" else f"compat_distribute.{attr}"


def _gpu_count():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    # The visible physical GPUs: listing logical devices would start the runtime,
    # which MultiWorkerMirroredStrategy must configure first.
    return len(tf.config.get_visible_devices("GPU"))


_CHOOSE_GPUS = (
    "TF2 uses every GPU the process sees. Choose them with CUDA_VISIBLE_DEVICES or "
    "tf.config.set_visible_devices(...) before building the strategy"
)
_CPU_ONLY = (
    'for the CPU only, hide the GPUs before building the strategy (CUDA_VISIBLE_DEVICES="" '
    'or tf.config.set_visible_devices([], "GPU"))'
)


def _gpus_argument(route, name, value, gpu_count):
    """`value` of the GPU count `name`, checked: an int from 0 to `gpu_count`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= gpu_count:
        raise ValueError(
            f"{route.spelling}: {name} must be an int from 0 (the CPU only) to the number of "
            f"GPUs this process sees ({gpu_count}); got {_validate.show(value)}. "
            f"{_CHOOSE_GPUS}."
        )
    return value


def _mirrored_devices(route, given, gpu_count):
    """TF 1.15's contrib MirroredStrategy: `num_gpus` (or its alias
    `num_gpus_per_worker`) GPUs, or the CPU when 0; exclusive with `devices`."""
    named = [n for n in ("num_gpus", "num_gpus_per_worker") if given.get(n) is not None]
    if not named:
        return {}
    if len(named) == 2:
        raise ValueError(
            f"{route.spelling}: got both num_gpus and num_gpus_per_worker (the same count in "
            f"TF1); pass only num_gpus."
        )
    if given.get("devices") is not None:
        raise ValueError(
            f"{route.spelling}: got both devices and {named[0]}; pass only devices, or only "
            f"{named[0]}."
        )
    count = _gpus_argument(route, named[0], given[named[0]], gpu_count)
    return {"devices": tuple(f"/device:GPU:{i}" for i in range(count)) or ("/device:CPU:0",)}


def _collective_gpus(route, given, gpu_count):
    """TF 1.15's contrib CollectiveAllReduceStrategy: `num_gpus_per_worker` GPUs,
    default 0, the CPU only. TF2's takes no device list: it uses every visible
    GPU, so a count other than that is refused."""
    count = _gpus_argument(route, "num_gpus_per_worker", given["num_gpus_per_worker"], gpu_count)
    if count != gpu_count:
        raise ValueError(
            f"{route.spelling}: num_gpus_per_worker={count} (TF1's default is 0, the CPU "
            f"only) cannot be honoured: TF2's strategy uses every GPU this process sees "
            f"({gpu_count}). Pass num_gpus_per_worker={gpu_count} to use them all; "
            f"{_CPU_ONLY}; or choose GPUs with CUDA_VISIBLE_DEVICES."
        )
    return {}


_MIRRORED_PARAMS = (
    Param("devices", new="devices"),
    Param("num_gpus", derived=True),
    Param("num_gpus_per_worker", derived=True),
    Param("cross_device_ops", new="cross_device_ops"),
    Param(
        "auto_shard_dataset",
        default=False,
        advice="TF2's MirroredStrategy runs on one worker and does not shard; across workers "
        "use tf.distribute.MultiWorkerMirroredStrategy, which shards datasets by "
        "tf.data.experimental.AutoShardPolicy",
    ),
    Param("cross_tower_ops", new="cross_device_ops"),
)

_COLLECTIVE_PARAMS = (
    Param("num_gpus_per_worker", default=0, derived=True),
    Param("communication", new="communication"),
)

# From TF 1.12-1.15's tensorflow/contrib/{distribute,cluster_resolver}/__init__.py.
ROUTES = (
    Route("distribute", "TPUStrategy", "compat_distribute.tpu:TPUStrategy", "1.12-1.15",
          note="TF 1.13-1.15's signature (resolver, steps_per_run, device_assignment); TF "
          "1.12's `num_cores` is refused, naming `device_assignment`"),
    Route("distribute", "initialize_tpu_system",
          _TF + "tpu.experimental.initialize_tpu_system", "1.14-1.15"),
    Route("distribute", "CollectiveAllReduceStrategy",
          "compat_distribute.multi_worker:MultiWorkerMirroredStrategy", "1.12-1.15",
          params=_COLLECTIVE_PARAMS, derive=_collective_gpus,
          note="`communication` passed on; `num_gpus_per_worker` (default 0: the CPU only) "
          "accepted when it is the number of visible GPUs, refused otherwise (TF2 uses every "
          "visible GPU: choose them with CUDA_VISIBLE_DEVICES)"),
    Route("distribute", "MirroredStrategy", _TF + "distribute.MirroredStrategy", "1.12-1.15",
          params=_MIRRORED_PARAMS, derive=_mirrored_devices,
          note="`devices`, `cross_device_ops` (or `cross_tower_ops`) passed on; `num_gpus` "
          "(or `num_gpus_per_worker`) N becomes `devices` GPU 0 to N-1, and 0 the CPU, as in "
          "TF 1.15"),
    Route("distribute", "OneDeviceStrategy", _TF + "distribute.OneDeviceStrategy", "1.12-1.15"),
    Route("distribute", "DistributionStrategy", _TF + "compat.v1.distribute.Strategy", "1.12-1.15"),
    Route("distribute", "DistributionStrategyExtended",
          _TF + "compat.v1.distribute.StrategyExtended", "1.13-1.15"),
    Route("distribute", "ReplicaContext", _TF + "distribute.ReplicaContext", "1.13-1.15"),
    Route("distribute", "CrossDeviceOps", _TF + "distribute.CrossDeviceOps", "1.13-1.15"),
    Route("distribute", "ReductionToOneDeviceCrossDeviceOps",
          _TF + "distribute.ReductionToOneDevice", "1.13-1.15"),
    Route("distribute", "get_replica_context", _TF + "distribute.get_replica_context", "1.13-1.15"),
    Route("distribute", "in_cross_replica_context",
          _TF + "distribute.in_cross_replica_context", "1.13-1.15"),
    Route("distribute", "get_distribution_strategy", _TF + "distribute.get_strategy", "1.12-1.15"),
    Route("distribute", "has_distribution_strategy", _TF + "distribute.has_strategy", "1.12-1.15"),
    Route("distribute", "get_loss_reduction",
          _TF + "compat.v1.distribute.get_loss_reduction", "1.12-1.15"),
) + tuple(
    Route("cluster_resolver", name, _TF + f"distribute.cluster_resolver.{tf2_name}", "1.12-1.15")
    for name, tf2_name in (
        ("TPUClusterResolver", "TPUClusterResolver"),
        ("TFConfigClusterResolver", "TFConfigClusterResolver"),
        ("SimpleClusterResolver", "SimpleClusterResolver"),
        ("ClusterResolver", "ClusterResolver"),
        ("UnionClusterResolver", "UnionResolver"),
        ("GCEClusterResolver", "GCEClusterResolver"),
        ("KubernetesClusterResolver", "KubernetesClusterResolver"),
        ("SlurmClusterResolver", "SlurmClusterResolver"),
    )
)

_STEPS_ADVICE = "write the loop as a tf.function calling strategy.run(step_fn, args=...)"

# tf.contrib.distribute names with no TF2 class of the same use: what to write instead.
GONE = {
    "ParameterServerStrategy": "use tf.compat.v1.distribute.experimental."
    "ParameterServerStrategy(cluster_resolver) (TF2's takes a cluster resolver)",
    "AllReduceCrossDeviceOps": "use tf.distribute.NcclAllReduce() or "
    "tf.distribute.HierarchicalCopyAllReduce()",
    "MultiWorkerAllReduce": "use tf.distribute.MultiWorkerMirroredStrategy, which all-reduces "
    "across workers itself",
    "DistributeConfig": "pass the strategy to tf.estimator.RunConfig(train_distribute=...)",
    "Monitor": _STEPS_ADVICE,
    "Step": _STEPS_ADVICE,
    "StandardInputStep": _STEPS_ADVICE,
    "StandardSingleLossStep": _STEPS_ADVICE,
    "UpdateContext": "use strategy.extended.update(var, fn)",
    "require_replica_context": "check tf.distribute.get_replica_context() is not None",
    "get_cross_replica_context": "use tf.distribute.get_strategy() in cross-replica context",
    "run_standard_tensorflow_server": "start a server with tf.distribute.Server(...)",
}

# Where the well-known tf.contrib modules went in TensorFlow 2.
MOVED = {
    "tpu": "tf.tpu and tf.compat.v1.tpu (TPUEstimator: tf.compat.v1.estimator.tpu)",
    "data": "tf.data and tf.data.experimental",
    "layers": "tf.keras.layers, or the tf_slim package",
    "slim": "the tf_slim package",
    "framework": "tf.compat.v1 (arg_scope: the tf_slim package)",
    "training": "tf.train and tf.compat.v1.train",
    "estimator": "tf.estimator",
    "learn": "tf.estimator",
    "keras": "tf.keras",
    "rnn": "tf.keras.layers (RNN cells), or tensorflow_addons.rnn",
    "cudnn_rnn": "tf.keras.layers.LSTM / GRU (cuDNN kernels by default)",
    "seq2seq": "tensorflow_addons.seq2seq",
    "opt": "tf.keras.optimizers, or tensorflow_addons.optimizers",
    "losses": "tf.keras.losses and tf.compat.v1.losses",
    "metrics": "tf.keras.metrics and tf.compat.v1.metrics",
    "image": "tf.image, or tensorflow_addons.image",
    "crf": "tensorflow_addons.text.crf",
    "summary": "tf.summary (TF1 summaries: tf.compat.v1.summary)",
    "lookup": "tf.lookup",
    "checkpoint": "tf.train.Checkpoint",
    "eager": "TensorFlow 2 itself (eager execution is the default)",
    "lite": "tf.lite",
    "quantize": "the tensorflow_model_optimization package",
    "distributions": "the tensorflow_probability package",
    "bayesflow": "the tensorflow_probability package",
    "compiler": "tf.function(jit_compile=True)",
    "tensorboard": "tf.summary, or the tensorboard package",
    "timeseries": "the tensorflow_probability package (tfp.sts)",
    "gan": "the tensorflow_gan package",
}

_SUNSET = (
    "https://github.com/tensorflow/community/blob/master/rfcs/20180907-contrib-sunset.md"
)


def _available():
    by_module = {}
    for r in ROUTES:
        by_module.setdefault(r.module, []).append(r.name)
    return "; ".join(
        f"tf.contrib.{module}: {', '.join(names)}" for module, names in by_module.items()
    )


def _missing(where, name):
    if name.startswith("__"):  # introspection (pickle, inspect, doctest): no advice
        return AttributeError(f"module '{where}' has no attribute '{name}'")
    spelling = f"{where}.{name}"
    if where == "tf.contrib" and name in MOVED:
        moved = f"In TensorFlow 2, {spelling} is {MOVED[name]}."
    elif where == "tf.contrib.distribute" and name in GONE:
        moved = f"{spelling} has no TensorFlow 2 equivalent: {GONE[name]}."
    else:
        moved = f"{spelling} did not survive: see {_SUNSET} for where each module went."
    return AttributeError(
        f"{moved} tf.contrib does not exist in TensorFlow 2; compat_distribute.install() "
        f"provides only {_available()}."
    )


def _resolve(route):
    target = _lazy.load(route.target)
    return _with_tf1_params(route, target) if route.params else target


def _with_tf1_params(route, target):
    """`target` called with TF1's parameters of `route` mapped onto it."""
    signature = inspect.Signature(
        inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default)
        for p in route.params
    )

    def build(*args, **kwargs):
        try:
            given = signature.bind(*args, **kwargs).arguments
        except TypeError as e:
            raise TypeError(f"{route.spelling}(): {e}. TF1's parameters: {signature}.") from None
        passed, passed_as = {}, {}
        for param in route.params:
            value = given.get(param.name, param.default)
            if param.derived or value is param.default or (
                isinstance(value, (bool, int)) and value == param.default
            ):
                continue
            if param.new in passed_as:  # a TF1 alias and the name it stood for
                raise TypeError(
                    f"{route.spelling}(): got both {passed_as[param.new]} and {param.name}, "
                    f"two names of one argument; pass only {param.new}."
                )
            if param.new:
                passed[param.new] = value
                passed_as[param.new] = param.name
            else:
                raise ValueError(
                    f"{route.spelling}: {param.name} cannot be mapped onto "
                    f"{route.target_spelling}; got {_validate.show(value)}. {param.advice}."
                )
        if route.derive:
            values = {p.name: given.get(p.name, p.default) for p in route.params}
            passed.update(route.derive(route, values, _gpu_count()))
        return target(**passed)

    build.__name__ = build.__qualname__ = route.name
    build.__doc__ = f"{route.spelling} on TensorFlow 2: {route.target_spelling}. {route.note}"
    build.__signature__ = signature
    return build


def _module(where, routes):
    module = types.ModuleType(where.replace("tf.", "tensorflow.", 1))
    module.__doc__ = f"{where} under compat_distribute.install()."

    def __getattr__(name):  # pylint: disable=invalid-name
        route = routes.get(name)
        if route is None:
            raise _missing(where, name)
        return _resolve(route)  # at each access: fake_tpu() may route the target

    module.__getattr__ = __getattr__
    module.__dir__ = lambda: sorted(routes)
    module.__all__ = sorted(routes)
    return module


def _build():
    contrib = _module("tf.contrib", {})
    for name in dict.fromkeys(r.module for r in ROUTES):
        routes = {r.name: r for r in ROUTES if r.module == name}
        setattr(contrib, name, _module(f"tf.contrib.{name}", routes))
    contrib.__all__ = sorted({r.module for r in ROUTES})
    contrib.__dir__ = lambda: list(contrib.__all__)
    return contrib


_CONTRIB = []


def module():
    """The `tf.contrib` module object that `install()` sets (one per process)."""
    if not _CONTRIB:
        _CONTRIB.append(_build())
    return _CONTRIB[0]


def markdown():
    """The migration page's table of `tf.contrib` routes."""
    lines = ["| TF1 name | TensorFlow | after `install()` | notes |", "|---|---|---|---|"]
    for r in ROUTES:
        lines.append(f"| `{r.spelling}` | {r.versions} | `{r.target_spelling}` | {r.note} |")
    for name, advice in GONE.items():
        lines.append(f"| `tf.contrib.distribute.{name}` | 1.12-1.15 | AttributeError | {advice} |")
    for name, home in MOVED.items():
        lines.append(f"| `tf.contrib.{name}` | 1.x | AttributeError | moved to {home} |")
    return "\n".join(lines)
