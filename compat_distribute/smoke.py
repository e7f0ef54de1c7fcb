"""The smoke test: a fixed list of TF1-style checks run through the shims.

`run_checks(target)` runs every check in `CHECKS` against one `Target` (a
strategy plus what the hardware promises: replica count, steps per run) and
returns a `Report`. The checks use the V1 surface on purpose
(`experimental_run_v2`, `reduce` without `axis`, `make_dataset_iterator`,
`experimental_run_steps_on_iterator`, `.steps_per_run`), so the deprecation
warnings those calls raise are caught around each check and reported once.

Picking the hardware (`fake_tpu_target`, `tpu_target`, `gpu_target`,
`auto_target`) lives here too; the command line is in `__main__`.
"""

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import warnings

import numpy as np

from compat_distribute.testing._fake_tpu.topologies import DEFAULT_TOPOLOGY  # the one default


class CheckFailed(Exception):
    """A check measured something other than what it expected."""


@dataclasses.dataclass
class Target:
    """The strategy under test and what the hardware promises about it."""

    strategy: object
    device: str  # one line for people: what runs the replicas
    replicas: int  # expected num_replicas_in_sync, known without asking the strategy
    steps_per_run: int
    # Builds a strategy whose replicas span 2 logical devices each, or None
    # where the hardware cannot split (the check is then skipped).
    split_strategy: object = None
    info: dict = dataclasses.field(default_factory=dict)  # extra JSON fields


@dataclasses.dataclass
class Result:
    name: str
    ok: bool
    detail: str
    seconds: float
    skipped: bool = False

    def as_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Report:
    device: str
    replicas: int
    steps_per_run: int
    results: list
    seconds: float
    steps_per_second: float | None = None
    deprecations: list = dataclasses.field(default_factory=list)
    other_warnings: list = dataclasses.field(default_factory=list)
    info: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self):
        return all(r.ok for r in self.results)

    @property
    def failures(self):
        return [r for r in self.results if not r.ok]

    def as_dict(self):
        return {
            "ok": self.ok,
            "device": self.device,
            "replicas": self.replicas,
            "steps_per_run": self.steps_per_run,
            "checks": [r.as_dict() for r in self.results],
            "steps_per_second": self.steps_per_second,
            "seconds": round(self.seconds, 3),
            "deprecation_warnings": self.deprecations,
            "other_warnings": self.other_warnings,
            **self.info,
        }


def _expect(what, got, want):
    if got != want:
        raise CheckFailed(f"{what}: expected {want!r}, got {got!r}")


def _local(strategy, value):
    return [np.asarray(v) for v in strategy.experimental_local_results(value)]


def _host_input():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    # Batches stay on the host until a step reads them: building the
    # per-device prefetch iterators costs seconds on 8 virtual devices, and
    # the dataset check covers that path.
    return tf.distribute.InputOptions(experimental_fetch_to_device=False)


def _smallest(strategy, value):
    return int(np.min(np.concatenate([np.ravel(v) for v in _local(strategy, value)])))


def _in_function(fn):
    """Calls `fn()` inside a `tf.function`: a TPU's `run` must be traced."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.function(fn)()


# The checks. Each takes the Target and a dict it may fill with measurements
# for the report (e.g. steps_per_second), and returns a one-line detail.


def check_replicas(target, measured):
    del measured
    strategy = target.strategy
    n = strategy.num_replicas_in_sync
    _expect("num_replicas_in_sync", n, target.replicas)
    devices = len(strategy.extended.worker_devices)
    _expect("len(extended.worker_devices)", devices, target.replicas)
    return f"{n} replicas in sync on {devices} worker devices"


def check_per_replica_values(target, measured):
    del measured
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    strategy = target.strategy

    def replica_fn():
        ctx = tf.distribute.get_replica_context()
        return tf.cast(ctx.replica_id_in_sync_group, tf.int32) * 10

    # The V1 name: warns, then runs as `run`.
    result = _in_function(lambda: strategy.experimental_run_v2(replica_fn))
    values = [int(v) for v in _local(strategy, result)]
    _expect(
        "per-replica values (10 * replica id)", values, [10 * i for i in range(target.replicas)]
    )
    return f"experimental_run_v2 gave 10*replica_id = {_short(values)}"


def check_all_reduce(target, measured):
    del measured
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    strategy = target.strategy
    n = target.replicas
    total = n * (n + 1) // 2  # replicas contribute 1, 2, ..., n

    def replica_fn():
        ctx = tf.distribute.get_replica_context()
        mine = tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32)
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, mine), mine

    summed, mine = _in_function(lambda: strategy.run(replica_fn))
    sums = [float(v) for v in _local(strategy, summed)]
    _expect("all_reduce(SUM) of 1..n in each replica", sums, [float(total)] * n)
    # V1 `reduce` without `axis`.
    reduced = float(strategy.reduce(tf.distribute.ReduceOp.SUM, mine))
    _expect("strategy.reduce(SUM, 1..n)", reduced, float(total))
    mean = float(strategy.reduce(tf.distribute.ReduceOp.MEAN, mine))
    _expect("strategy.reduce(MEAN, 1..n)", mean, (n + 1) / 2)
    return f"sum of 1..{n} = {total:g} in all {n} replicas; reduce SUM {reduced:g}, MEAN {mean:g}"


def check_run_steps(target, measured):
    del measured
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    strategy = target.strategy
    n = target.replicas
    steps = target.steps_per_run
    # A TPU strategy knows its steps_per_run (V1 attribute) and run_steps
    # defaults to it; other strategies are told.
    own_steps = getattr(strategy, "steps_per_run", None)
    if own_steps is not None:
        _expect("strategy.steps_per_run", own_steps, steps)
    steps_arg = None if own_steps is not None else steps
    with strategy.scope():
        counter = tf.Variable(
            0,
            dtype=tf.int64,
            synchronization=tf.VariableSynchronization.ON_WRITE,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
    # Batch b holds n*b .. n*b + n-1: one element per replica, so the values
    # seen in the last step tell which batch that step consumed.
    dataset = tf.data.Dataset.range(1_000_000).batch(n, drop_remainder=True)

    def step(batch):
        counter.assign_add(1)
        return batch

    iterator = iter(strategy.experimental_distribute_dataset(dataset, _host_input()))
    last = strategy.run_steps(step, iterator, steps_arg)
    _expect("counter after run_steps", int(counter.numpy()), steps)
    _expect("first value of the last batch", _smallest(strategy, last), n * (steps - 1))

    # TF1's own loop, over a V1 iterator.
    v1_iterator = strategy.make_dataset_iterator(dataset)
    v1_iterator.initialize()

    def v1_step(ctx, inputs):
        ctx.set_last_step_output("batch", strategy.run(step, args=(inputs,)))

    ctx = strategy.extended.experimental_run_steps_on_iterator(
        v1_step, v1_iterator, iterations=steps
    )
    _expect("counter after experimental_run_steps_on_iterator", int(counter.numpy()), 2 * steps)
    first = _smallest(strategy, ctx.last_step_outputs["batch"])
    _expect("first value of its last batch", first, n * (steps - 1))
    return (
        f"counter 0 -> {steps} after run_steps, -> {2 * steps} after "
        f"experimental_run_steps_on_iterator (steps_per_run={steps})"
    )


def check_logical_devices(target, measured):
    del measured
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if target.split_strategy is None:
        raise _Skip("this hardware has one logical device per replica")
    strategy, cores_per_replica = target.split_strategy()
    x = tf.reshape(tf.range(8 * cores_per_replica * 2, dtype=tf.float32), [8, -1])

    @tf.function
    def step():
        def replica_fn():
            split = strategy.experimental_split_to_logical_devices(x, [1, cores_per_replica])
            return split * 2.0

        return strategy.run(replica_fn)

    outs = _local(strategy, step())
    for out in outs:
        if not np.array_equal(out, x.numpy() * 2.0):
            raise CheckFailed("split_to_logical_devices changed the values it split")
    return (
        f"{strategy.num_replicas_in_sync} replicas x {cores_per_replica} logical devices; "
        f"a [8, {x.shape[1]}] tensor split on dim 1 kept its values"
    )


def check_dataset(target, measured):
    del measured
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    strategy = target.strategy
    n = target.replicas
    per_replica = 2
    dataset = tf.data.Dataset.range(4 * n).batch(per_replica * n)
    iterator = strategy.make_dataset_iterator(dataset)  # V1
    iterator.initialize()
    seen = []
    for batch_index in range(2):
        parts = _local(strategy, iterator.get_next())
        sizes = [int(p.shape[0]) for p in parts]
        _expect(f"per-replica batch sizes of batch {batch_index}", sizes, [per_replica] * n)
        seen.extend(int(v) for p in parts for v in p)
    _expect("elements seen over 2 global batches", sorted(seen), list(range(4 * n)))
    return (
        f"global batch {per_replica * n} -> {n} x {per_replica} per replica; "
        f"2 batches delivered all {4 * n} elements once"
    )


def check_checkpoint(target, measured):
    del measured
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    strategy = target.strategy
    with strategy.scope():
        weights = tf.Variable(tf.random.stateless_normal([16, 8], seed=[1, 2]))
        momentum = tf.Variable(tf.random.stateless_normal([16, 8], seed=[3, 4]))
        step = tf.Variable(12345, dtype=tf.int64)
    variables = {"weights": weights, "momentum": momentum, "step": step}
    checkpoint = tf.train.Checkpoint(**variables)
    saved = {k: v.numpy().copy() for k, v in variables.items()}
    directory = tempfile.mkdtemp(prefix="compat_distribute_smoke_")
    try:
        path = checkpoint.save(os.path.join(directory, "ckpt"))
        for v in variables.values():
            v.assign(tf.zeros_like(v))
        checkpoint.restore(path).assert_consumed()
        for name, value in variables.items():
            restored = value.numpy()
            if restored.tobytes() != saved[name].tobytes():
                raise CheckFailed(f"{name} differs after restore from {path}")
        size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    values = sum(v.size for v in saved.values())
    return f"{len(saved)} variables ({values} values, {size} bytes) restored bit-identically"


TRAIN_STEPS = 40  # at least this many steps are timed, in at least 5 calls


def check_training(target, measured):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    strategy = target.strategy
    n = target.replicas
    steps = target.steps_per_run
    global_batch = 8 * n
    features = tf.random.stateless_normal([global_batch * 4, 4], seed=[5, 6])
    true_w = tf.constant([[1.0], [-2.0], [3.0], [0.5]])
    labels = tf.matmul(features, true_w) + 1.0
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    dataset = dataset.repeat().batch(global_batch, drop_remainder=True)
    with strategy.scope():
        # Gradients are all-reduced before the update, so every replica
        # applies the same one: updating from the first replica suffices.
        kw = dict(aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        w = tf.Variable(tf.zeros([4, 1]), **kw)
        b = tf.Variable(tf.zeros([1]), **kw)
    learning_rate = 0.1

    def loss_of(x, y):
        return tf.reduce_sum(tf.square(tf.matmul(x, w) + b - y)) / global_batch

    def train_step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = loss_of(x, y)
        grads = tape.gradient(loss, [w, b])
        ctx = tf.distribute.get_replica_context()
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        w.assign_sub(learning_rate * grads[0])
        b.assign_sub(learning_rate * grads[1])
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss)

    def full_loss():
        return float(tf.reduce_mean(tf.square(tf.matmul(features, w) + b - labels)))

    before = full_loss()
    iterator = iter(strategy.experimental_distribute_dataset(dataset, _host_input()))
    steps_arg = None if getattr(strategy, "steps_per_run", None) else steps
    strategy.run_steps(train_step, iterator, steps_arg)  # traces (and compiles) the loop
    calls = max(5, -(-TRAIN_STEPS // steps))
    start = time.perf_counter()
    for _ in range(calls):
        last = strategy.run_steps(train_step, iterator, steps_arg)
    float(_local(strategy, last)[0])  # wait for the device
    elapsed = time.perf_counter() - start
    after = full_loss()
    total_steps = steps * (calls + 1)
    measured["steps_per_second"] = round(steps * calls / elapsed, 1)
    if not after < 0.1 * before:
        raise CheckFailed(
            f"loss did not fall to under a tenth: {before:.4g} -> {after:.4g} "
            f"over {total_steps} steps"
        )
    return (
        f"linear model, loss {before:.4g} -> {after:.4g} over {total_steps} steps; "
        f"{measured['steps_per_second']:g} steps/s"
    )


class _Skip(Exception):
    """The hardware cannot run this check; not a failure."""


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    fn: object
    what: str  # for --help


CHECKS = (
    Check("replicas", check_replicas, "replica count matches the hardware"),
    Check("per_replica_values", check_per_replica_values, "each replica returns its own value"),
    Check("all_reduce", check_all_reduce, "all-reduce and reduce give a known sum and mean"),
    Check("run_steps", check_run_steps, "on-device loops advance a counter by steps_per_run"),
    Check("logical_devices", check_logical_devices, "split_to_logical_devices"),
    Check("dataset", check_dataset, "per-replica batch sizes from make_dataset_iterator"),
    Check("checkpoint", check_checkpoint, "tf.train.Checkpoint round trip, bit-identical"),
    Check("training", check_training, "a tiny model's loss falls; steps per second"),
)
CHECK_NAMES = tuple(c.name for c in CHECKS)


def _short(values, limit=8):
    if len(values) <= limit:
        return str(values)
    return f"[{values[0]}, {values[1]}, ..., {values[-1]}]"


class _NoTTY:
    def isatty(self):
        return False


class Progress:
    """A one-line ticker on stderr while a check runs, only when it is a TTY."""

    def __init__(self, stream=None, interval=0.2):
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self._stop = threading.Event()
        self._thread = None
        self._label = ""

    def start(self, label):
        if not self.enabled:
            return
        self._label = label
        self._stop.clear()
        started = time.perf_counter()

        def tick():
            while not self._stop.wait(self.interval):
                self.stream.write(f"\r  {self._label} {time.perf_counter() - started:5.1f}s")
                self.stream.flush()

        self._thread = threading.Thread(target=tick, daemon=True)
        self._thread.start()

    def stop(self):
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.stream.write("\r\033[K")  # clear the ticker line
        self.stream.flush()


def run_checks(target, *, inject_failure=None, progress=None, on_start=None, on_result=None):
    """Runs `CHECKS` against `target`; returns a `Report`.

    `inject_failure` names a check whose result is turned into a failure after
    it ran (to test the failure path end to end). `progress` (a `Progress`)
    ticks while each check runs. `on_start(name)` and `on_result(result)` are
    called around each check, for printing results as they come.
    """
    if inject_failure is not None and inject_failure not in CHECK_NAMES:
        raise ValueError(
            f"inject_failure must be one of {', '.join(CHECK_NAMES)}; got {inject_failure!r}."
        )
    progress = progress or Progress(stream=_NoTTY())
    results = []
    measured = {}
    deprecations = {}
    other_warnings = {}
    started = time.perf_counter()
    for index, check in enumerate(CHECKS):
        if on_start is not None:
            on_start(check.name)
        progress.start(f"[{index + 1}/{len(CHECKS)}] {check.name}")
        t0 = time.perf_counter()
        skipped = False
        with _captured_warnings() as caught:
            try:
                detail, ok = check.fn(target, measured), True
            except _Skip as e:
                detail, ok, skipped = f"skipped: {e}", True, True
            except CheckFailed as e:
                detail, ok = str(e), False
            except Exception as e:  # pylint: disable=broad-except
                detail, ok = _one_line(f"{type(e).__name__}: {e}"), False
        seconds = time.perf_counter() - t0
        progress.stop()
        for deprecation, message in caught:
            bucket = deprecations if deprecation else other_warnings
            bucket.setdefault(message, None)
        if check.name == inject_failure:
            detail, ok = f"failure injected by --inject-failure (measured: {detail})", False
        result = Result(check.name, ok, detail, round(seconds, 3), skipped)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return Report(
        device=target.device,
        replicas=target.replicas,
        steps_per_run=target.steps_per_run,
        results=results,
        seconds=time.perf_counter() - started,
        steps_per_second=measured.get("steps_per_second"),
        deprecations=list(deprecations),
        other_warnings=list(other_warnings),
        info=dict(target.info),
    )


class _LogCollector(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _captured_warnings():
    """Collects Python warnings and TensorFlow's logged warnings in a block.

    Yields a list that is filled, on exit, with (is_deprecation, message)
    pairs. TensorFlow logs its own deprecations (`deprecation.deprecated`)
    instead of warning, so its logger is diverted here too.
    """
    caught = []
    logger = logging.getLogger("tensorflow")
    collector = _LogCollector()
    saved = logger.handlers[:], logger.propagate
    logger.handlers[:] = [collector]
    logger.propagate = False
    try:
        with warnings.catch_warnings(record=True) as raised:
            warnings.simplefilter("always")
            yield caught
    finally:
        logger.handlers[:], logger.propagate = saved
        for w in raised:
            caught.append((issubclass(w.category, DeprecationWarning), _one_line(str(w.message))))
        for message in collector.messages:
            first = message.strip().splitlines()[0] if message.strip() else message
            first = re.sub(r"^From .*?:\d+: ", "", first)  # TF's "From file:line: " prefix
            caught.append(("deprecated" in first, _one_line(first)))


def _one_line(text, limit=300):
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# Text report.

NAME_WIDTH = max(len(n) for n in CHECK_NAMES)


def format_header(target):
    return f"compat-distribute smoke: {target.device}, steps_per_run={target.steps_per_run}"


def format_result(result):
    status = "SKIP" if result.skipped else ("PASS" if result.ok else "FAIL")
    return f"  {status}  {result.name:<{NAME_WIDTH}}  {result.seconds:6.2f}s  {result.detail}"


def format_footer(report):
    lines = []
    if report.steps_per_second is not None:
        lines.append(
            f"training: {report.steps_per_second:g} steps/s "
            f"({report.steps_per_run} steps per run_steps call)"
        )
    if report.deprecations:
        lines.append(
            f"TF1-style calls raised {len(report.deprecations)} deprecation warning(s), "
            f"as expected: " + "; ".join(report.deprecations)
        )
    passed = sum(r.ok and not r.skipped for r in report.results)
    skipped = sum(r.skipped for r in report.results)
    summary = f"{passed}/{len(report.results)} checks passed"
    if skipped:
        summary += f", {skipped} skipped"
    lines.append(f"{summary} in {report.seconds:.1f}s")
    for r in report.failures:
        lines.append(f"FAILED {r.name}: {r.detail}")
    return "\n".join(lines)


def format_report(report, header):
    return "\n".join([header, *map(format_result, report.results), format_footer(report)])


# Hardware.


class Unreachable(RuntimeError):
    """The requested hardware cannot be reached."""


CONNECT_TIMEOUT_S = 30.0


def _within(seconds, fn, what):
    """`fn()`, or `Unreachable` when it has not returned after `seconds`.

    Cloud TPU look-ups and gRPC connections can block for minutes on a network
    that drops packets; the thread is a daemon, so a stuck call does not keep
    the process alive.
    """
    box = {}

    def call():
        try:
            box["value"] = fn()
        except BaseException as e:  # pylint: disable=broad-except
            box["error"] = e

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise Unreachable(f"{what} did not finish within {seconds:g}s")
    if "error" in box:
        error = box["error"]
        raise Unreachable(f"{what} failed: {_one_line(f'{type(error).__name__}: {error}')}")
    return box["value"]


def _probe(address, seconds):
    """Raises `Unreachable` unless a TCP connection to `host:port` opens in time."""
    import socket  # pylint: disable=g-import-not-at-top

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=seconds):
            pass
    except (OSError, ValueError) as e:
        raise Unreachable(f"TPU worker {address} does not answer: {e}") from None


def tpu_target(name, steps_per_run, *, timeout=CONNECT_TIMEOUT_S):
    """A real TPU: `name` as `TPUClusterResolver(tpu=...)` takes it ("local" too)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from compat_distribute import tpu  # pylint: disable=g-import-not-at-top

    resolver = _within(
        timeout,
        lambda: tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name),
        f"looking up TPU {name!r}",
    )
    if name != "local":
        master = resolver.master()
        if not master:
            raise Unreachable(f"TPU {name!r} has no worker address")
        _probe(master.split("://", 1)[-1], timeout)
        _within(
            timeout,
            lambda: tf.config.experimental_connect_to_cluster(resolver),
            f"connecting to TPU {name!r} at {master}",
        )
    topology = _within(
        timeout,
        lambda: tf.tpu.experimental.initialize_tpu_system(resolver),
        f"initializing TPU {name!r}",
    )
    cores = topology.num_tasks * topology.num_tpus_per_task
    strategy = tpu.TPUStrategy(resolver, steps_per_run=steps_per_run)

    split_strategy = _split_strategy(resolver, lambda: topology, steps_per_run)
    return Target(
        strategy=strategy,
        device=f"TPU {name} ({cores} cores on {topology.num_tasks} host(s))",
        replicas=cores,
        steps_per_run=steps_per_run,
        split_strategy=split_strategy if cores >= 2 else None,
        info={"backend": "tpu", "tpu": name},
    )


def _split_strategy(resolver, topology, steps_per_run):
    """Builds, on demand, a TPUStrategy whose replicas span two logical cores.

    `topology` is called only then (the fake's initialize_tpu_system is cheap
    but not free).
    """
    from compat_distribute import tpu

    def build():
        assignment = _two_cores_per_replica(topology())
        return (
            tpu.TPUStrategy(resolver, steps_per_run=steps_per_run, device_assignment=assignment),
            2,
        )

    return build


def _two_cores_per_replica(topology):
    """A device assignment of `topology` with replicas of two adjacent cores."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if topology.num_tasks > 1:
        # A pod: pairs of a host's consecutive cores (a chip's two cores, or
        # two neighbouring chips), host by host, as a fake pod runs replicas.
        coordinates = topology.device_coordinates.tolist()
        pairs = [host[i : i + 2] for host in coordinates for i in range(0, len(host), 2)]
        return tf.tpu.experimental.DeviceAssignment(topology, pairs)
    # Two cores of one chip where chips have two (v2, v3), else two chips.
    shape = [1, 1, 1, 2] if topology.mesh_shape[-1] >= 2 else [2, 1, 1, 1]
    cores = topology.num_tasks * topology.num_tpus_per_task
    return tf.tpu.experimental.DeviceAssignment.build(
        topology, computation_shape=shape, num_replicas=cores // 2
    )


def fake_tpu_target(topology, steps_per_run):
    """The fake TPU of `compat_distribute.testing` on virtual CPU devices.

    Creates the virtual devices it needs, so call it before TensorFlow starts.
    """
    from compat_distribute import tpu  # pylint: disable=g-import-not-at-top
    from compat_distribute.testing import _fake_tpu as fake_tpu

    resolver = fake_tpu.FakeTPUClusterResolver(topology)
    strategy = tpu.TPUStrategy(resolver, steps_per_run=steps_per_run)
    cores = resolver.num_cores
    where = (
        f"{cores} virtual CPU devices"
        if resolver.pod is None
        else f"{resolver.num_hosts} host processes"
    )

    split_strategy = _split_strategy(
        resolver, lambda: fake_tpu.initialize_tpu_system(resolver), steps_per_run
    )
    return Target(
        strategy=strategy,
        device=f"fake TPU {topology} ({cores} cores on {where})",
        replicas=cores,
        steps_per_run=steps_per_run,
        split_strategy=split_strategy if cores >= 2 else None,
        info={"backend": "fake_tpu", "topology": topology},
    )


def topologies():
    """The fake TPU's preset topology names, pods included."""
    from compat_distribute.testing import _fake_tpu as fake_tpu

    return tuple(fake_tpu.PRESETS)


def gpu_target(steps_per_run):
    """All local GPUs, through the `MultiWorkerMirroredStrategy` shim (one worker)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from compat_distribute import multi_worker  # pylint: disable=g-import-not-at-top

    gpus = tf.config.list_physical_devices("GPU")  # does not start the runtime
    if not gpus:
        raise Unreachable("no GPU is visible to TensorFlow")
    strategy = multi_worker.MultiWorkerMirroredStrategy()
    return Target(
        strategy=strategy,
        device=f"{len(gpus)} GPU(s) via MultiWorkerMirroredStrategy",
        replicas=len(gpus),
        steps_per_run=steps_per_run,
        info={"backend": "gpu"},
    )


def _tpu_reachable(timeout):
    """The `--tpu` name of a TPU this machine can use, or None."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    try:
        if tf.config.list_physical_devices("TPU"):
            return "local"
    except Exception:  # pylint: disable=broad-except
        pass
    # Without a name, the resolver finds the TPU of a Cloud TPU VM or $TPU_NAME.
    try:
        resolver = _within(
            timeout, tf.distribute.cluster_resolver.TPUClusterResolver, "looking up a TPU"
        )
        master = resolver.master()
        _probe(master.split("://", 1)[-1], timeout)
    except (Unreachable, ValueError):
        return None
    return os.environ.get("TPU_NAME") or master


def auto_target(steps_per_run, topology=DEFAULT_TOPOLOGY, *, timeout=5.0):
    """A TPU if one is reachable, else the local GPUs, else the fake TPU."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    name = _tpu_reachable(timeout)
    if name is not None:
        return tpu_target(name, steps_per_run, timeout=CONNECT_TIMEOUT_S)
    if tf.config.list_physical_devices("GPU"):
        return gpu_target(steps_per_run)
    return fake_tpu_target(topology, steps_per_run)
