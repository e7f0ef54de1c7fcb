"""TPU pod programs, each run as a fresh client process by test_fake_tpu_pods.

`python pod_programs.py NAME [ARG]` runs one program and prints one line,
`RESULT <json>`, with what the tests check. A pod client changes its process's
TensorFlow context for good (it connects to the pod's hosts), so pod programs
never run inside the test process.
"""

import json
import os
import signal
import sys
import time

from support.leftovers import listening
from support.processes import descendants
from support.processes import running
from support.processes import wait_for
from support.processes import wait_gone
from support.steps import replica_ids_summed

from compat_distribute import _exit

GLOBAL_BATCH = 64
# Training runs as TPU programs do: several steps a call, in a tf.range loop.
TRAIN_CALLS = 15  # the loss is below 1e-9 of its start by the 15th call
STEPS_PER_CALL = 10
LEARNING_RATE = 0.5
# How long a pod's watchdog may take to see a host or the relay die (scaled).
WATCHDOG_S = 30.0


def _one_trace(strategy):
    """How often a step's replica function was traced, and the devices of the
    calls in the step that run a function TensorFlow must not inline (one a host)."""
    import tensorflow as tf

    from compat_distribute.testing import _tf

    traces = []

    @tf.function
    def step():
        def replica():
            traces.append(1)
            context = tf.distribute.get_replica_context()
            return context.all_reduce("SUM", tf.cast(context.replica_id_in_sync_group, tf.float32))

        return strategy.run(replica)

    step()
    graph = step.get_concrete_function().graph
    host_calls = []
    for op in graph.get_operations():
        if op.type in ("PartitionedCall", "StatefulPartitionedCall"):
            called = _tf.graph_function(graph, op.get_attr("f").name)
            if called.definition.attr["_noinline"].b:
                host_calls.append(op.device)
    return len(traces), host_calls


def _constant_step(strategy):
    """A step that reads no variable and no input: its replicas return constants."""
    import tensorflow as tf

    @tf.function
    def step():
        return strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)

    return lambda: float(step())


def _failure(step):
    """[error type, its message's first 2000 characters, seconds until it came]."""
    started = time.monotonic()
    try:
        step()
    except Exception as e:  # pylint: disable=broad-except
        return [type(e).__name__, str(e)[:2000], time.monotonic() - started]
    return ["no error", "", time.monotonic() - started]


def _collectives_in_a_loop(strategy, rounds=3):
    """A step whose while loop sums, gathers and adds to a SUM variable (a merge_call,
    as a tf-keras metric's update in a gradient-accumulation loop) each round: the
    per-replica sums, gathers and the variable's copies, as sorted sets."""
    import tensorflow as tf

    n = strategy.num_replicas_in_sync
    with strategy.scope():
        total = tf.Variable(0.0, aggregation=tf.VariableAggregation.SUM)

    def step(rounds):
        context = tf.distribute.get_replica_context()
        x = tf.cast(context.replica_id_in_sync_group, tf.float32)

        def one_round(i, summed, gathered):
            with tf.control_dependencies([total.assign_add(x)]):
                return (
                    i + 1,
                    summed + context.all_reduce("SUM", x + 1.0),
                    gathered + context.all_gather(tf.reshape(x, [1]), axis=0),
                )

        _, summed, gathered = tf.while_loop(
            lambda i, *_: i < rounds, one_round, (0, tf.constant(0.0), tf.zeros([n]))
        )
        return summed, gathered

    sums, gathers = tf.function(lambda: strategy.run(step, (tf.constant(rounds),)))()
    local = strategy.experimental_local_results
    return [
        sorted({float(s) for s in local(sums)}),
        sorted({tuple(g.numpy().tolist()) for g in local(gathers)}),
        sorted({float(c) for c in total.values}),
    ]


def iterator_left_in_a_step(strategy):
    """Steps that each make an iterator of a distributed dataset and leave it after
    one batch of several: each replica's first element, twice."""
    import tensorflow as tf

    n = strategy.num_replicas_in_sync
    dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.range(4 * n).batch(n))

    @tf.function
    def first_batch(dataset):
        return strategy.run(tf.identity, args=(next(iter(dataset)),))

    return [
        [int(v[0]) for v in strategy.experimental_local_results(first_batch(dataset))]
        for _ in range(2)
    ]


def _reduced_to_the_client(strategy):
    """strategy.reduce SUM and MEAN of per-replica values, and the tasks of the
    AddN ops the reduction traced ({task: count})."""
    import collections

    import tensorflow as tf

    @tf.function
    def step():
        def replica():
            i = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
            return i + 1.0, tf.stack([i, 2.0 * i])

        scalar, vector = strategy.run(replica)
        return (
            strategy.reduce("SUM", scalar, axis=None),
            strategy.reduce("MEAN", scalar, axis=None),
            strategy.reduce("SUM", vector, axis=None),
        )

    total, mean, vector = step()
    tasks = collections.Counter(
        tf.DeviceSpec.from_string(op.device).task
        for op in step.get_concrete_function().graph.get_operations()
        if op.type == "AddN"
    )
    return [float(total), float(mean), vector.numpy().tolist()], dict(sorted(tasks.items()))


def _dataset_fn(contexts):
    """Points of y = 3x + 1, sharded across the input pipelines (one per host)."""
    import tensorflow as tf

    def dataset_fn(context):
        contexts.append(
            (context.num_input_pipelines, context.input_pipeline_id, context.num_replicas_in_sync)
        )
        x = tf.range(1024, dtype=tf.float32) / 1024.0
        points = tf.data.Dataset.from_tensor_slices((x[:, None], 3.0 * x[:, None] + 1.0))
        return (
            points.shuffle(1024, seed=7, reshuffle_each_iteration=False)
            .shard(context.num_input_pipelines, context.input_pipeline_id)
            .repeat()
            .batch(context.get_per_replica_batch_size(GLOBAL_BATCH), drop_remainder=True)
        )

    return dataset_fn


def _train(strategy, calls):
    """An unmodified TPU training loop: per-host input, Keras SGD, STEPS_PER_CALL steps
    a call; the per-host input contexts, each call's last loss, a checkpoint of the
    model and optimizer, the input iterator."""
    import tensorflow as tf

    contexts = []
    dataset = strategy.distribute_datasets_from_function(_dataset_fn(contexts))
    with strategy.scope():
        w = tf.Variable([[0.0]], name="w")
        b = tf.Variable([0.0], name="b")
        optimizer = tf.keras.optimizers.SGD(LEARNING_RATE)

    @tf.function
    def train_steps(iterator, steps):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(x @ w + b - y)) / GLOBAL_BATCH
            gradients = tape.gradient(loss, [w, b])
            optimizer.apply_gradients(zip(gradients, [w, b]))
            return loss

        loss = tf.constant(0.0)
        for _ in tf.range(steps):
            per_replica = strategy.run(replica_step, args=next(iterator))
            loss = strategy.reduce("SUM", per_replica, axis=None)
        return loss

    iterator = iter(dataset)
    losses = [float(train_steps(iterator, tf.constant(STEPS_PER_CALL))) for _ in range(calls)]
    return contexts, losses, tf.train.Checkpoint(w=w, b=b, optimizer=optimizer), iterator


def _descendants():
    return sorted(descendants())


def _bytes_written(pid):
    with open(f"/proc/{pid}/io") as f:
        return int(next(line for line in f if line.startswith("wchar")).split()[1])


def pod(checkpoint_dir):
    """The shared pod: TF2 pod code, a training run, the V1 shim, a killed host."""
    started = time.monotonic()
    import tensorflow as tf

    import compat_distribute
    from compat_distribute.testing import FakeTPUClusterResolver
    from compat_distribute.testing import fake_tpu

    out = {}
    fake = fake_tpu("v3-32").start()
    out["start_s"] = time.monotonic() - started
    host_pids = fake.pod.pids
    out["host_pids"] = host_pids
    relay = [fake.pod.relay_pid] if fake.pod.relay_pid else []  # None on the host network
    zygote = [fake.pod.zygote_pid] if fake.pod.zygote_pid else []  # Forked the hosts.
    out["host_processes_are_children"] = sorted(host_pids + relay + zygote) == _descendants()
    cluster_dir = fake.pod.directory

    # What TPU pod code does, unmodified.
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="my-pod")
    out["master"] = resolver.master()
    out["cluster_spec"] = resolver.cluster_spec().as_dict()
    out["num_accelerators"] = resolver.num_accelerators()
    tf.config.experimental_connect_to_cluster(resolver)
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    out["topology"] = [topology.num_tasks, topology.num_tpus_per_task, topology.mesh_shape.tolist()]
    out["host_0_chips"] = sorted({tuple(c[:3]) for c in topology.device_coordinates[0].tolist()})
    strategy = tf.distribute.TPUStrategy(resolver)
    extended = strategy.extended
    out["replicas"] = [
        strategy.num_replicas_in_sync,
        extended.num_hosts,
        extended.num_replicas_per_host,
    ]
    out["replica_devices"] = list(extended.worker_devices)
    out["all_reduce"] = replica_ids_summed(strategy)
    out["traces"], out["host_calls"] = _one_trace(strategy)
    constant_step = _constant_step(strategy)
    out["constant_step"] = constant_step()
    out["reduce"], out["reduce_add_n_tasks"] = _reduced_to_the_client(strategy)
    out["collectives_in_a_loop"] = _collectives_in_a_loop(strategy)
    out["iterator_left_in_a_step"] = iterator_left_in_a_step(strategy)
    try:
        strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("SUM", 1.0))
    except Exception as e:  # pylint: disable=broad-except
        out["eager_run"] = [type(e).__name__, str(e)]

    # A device assignment whose replicas go to hosts in order: cores 0-3 of hosts 1 and 2.
    coordinates = topology.device_coordinates
    assignment = tf.tpu.experimental.DeviceAssignment(
        topology, [[c] for c in coordinates[1, :4].tolist() + coordinates[2, :4].tolist()]
    )
    assigned = tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)
    out["assigned"] = [
        assigned.num_replicas_in_sync,
        assigned.extended.num_hosts,
        list(assigned.extended.worker_devices),
        replica_ids_summed(assigned)[0],
    ]

    # One dataset for the whole pod: TensorFlow shards it across the hosts' pipelines.
    @tf.function
    def identity_step(batch):
        return strategy.run(tf.identity, args=(batch,))

    out["distributed_batches"] = [
        sorted(int(v) for r in strategy.experimental_local_results(identity_step(b)) for v in r)
        for b in strategy.experimental_distribute_dataset(tf.data.Dataset.range(96).batch(32))
    ]

    # An unmodified training program: 150 steps of per-host input, a falling loss, a
    # checkpoint.
    contexts, losses, checkpoint, _ = _train(strategy, TRAIN_CALLS)
    out["input_contexts"] = contexts
    out["losses"] = losses
    out["model"] = [float(checkpoint.w.numpy()[0, 0]), float(checkpoint.b.numpy()[0])]
    out["checkpoint"] = checkpoint.save(os.path.join(checkpoint_dir, "pod"))
    out["checkpoint_files"] = sorted(os.listdir(checkpoint_dir))

    # Who writes a checkpoint's data: host 0 (the master), as on a pod.
    with strategy.scope():
        big = tf.Variable(tf.zeros([250_000]))  # 1 MB
    pids = [os.getpid()] + host_pids
    before = [_bytes_written(p) for p in pids]
    tf.train.Checkpoint(big=big).save(os.path.join(checkpoint_dir, "big"))
    out["checkpoint_bytes_written"] = [_bytes_written(p) - b for p, b in zip(pids, before)]

    # The V1 shim, on a resolver of its own: it shares the fake's hosts.
    v1 = compat_distribute.TPUStrategy(FakeTPUClusterResolver("v3-32"), steps_per_run=4)
    out["v1"] = [v1.num_replicas_in_sync, v1.extended.num_hosts, v1.extended.steps_per_run]
    out["v1_all_reduce"] = replica_ids_summed(v1)[0]
    out["host_pids_after_v1"] = fake.pod.pids

    # A host dies: the next step fails, naming it, within the timeout.
    os.kill(host_pids[2], 9)
    # The watchdog looks 4 times a second; a loaded machine may delay it.
    wait_for(lambda: (fake.pod.failure or "").startswith("host 2"), WATCHDOG_S)
    out["watchdog"] = fake.pod.failure
    # Steps that touch no variable: one traced before, one traced now.
    out["dead_host_steps"] = [
        _failure(constant_step),
        _failure(lambda: replica_ids_summed(strategy)),
    ]
    try:
        fake.pod.check()
    except Exception as e:  # pylint: disable=broad-except
        out["check"] = [type(e).__name__, str(e).splitlines()[0], e.task_id]

    # A stopped host would hang every step: the watchdog kills it.
    os.kill(host_pids[1], signal.SIGSTOP)
    wait_for(
        lambda: (fake.pod.failure or "").startswith("host 1") and not running(host_pids[1]),
        WATCHDOG_S,
    )
    out["stopped_host"] = [fake.pod.failure, running(host_pids[1])]

    fake.stop()
    out["after_stop"] = {
        "hosts_alive": [p for p in host_pids if os.path.exists(f"/proc/{p}")],
        "children": _descendants(),
        "cluster_dir_exists": os.path.exists(cluster_dir),
        "running": fake.pod.running,
    }

    # Started again: fresh hosts, and the same code runs on them.
    with fake:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="my-pod")
        tf.config.experimental_connect_to_cluster(resolver)
        restarted = fake.pod.pids
        out["restart"] = [
            sorted(set(restarted) & set(host_pids)),
            len(restarted),
            replica_ids_summed(tf.distribute.TPUStrategy(resolver))[0],
        ]
    out["restart_hosts_alive"] = [p for p in restarted if os.path.exists(f"/proc/{p}")]
    return out


def one_host(checkpoint):
    """`hosts=1`: the same 32 replicas in this process, after a pod of its own (a
    v4-16) was stopped; the pod program's checkpoint restored."""
    from compat_distribute.testing import set_virtual_devices

    set_virtual_devices(32)
    import tensorflow as tf

    import compat_distribute
    from compat_distribute.testing import FakeTPUClusterResolver
    from compat_distribute.testing import _tf
    from compat_distribute.testing import fake_tpu

    out = {}
    # A pod first, stopped: its hosts leave this process's context with it (any pod
    # shows it: a v4-16, 2 hosts).
    with fake_tpu("v4-16") as pod_fake:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="my-pod")
        tf.config.experimental_connect_to_cluster(resolver)
        pod_sum = replica_ids_summed(tf.distribute.TPUStrategy(resolver))[0]
    server_def = _tf.get_server_def()
    out["pod_before"] = [
        pod_sum,
        pod_fake.pod.running,
        sorted(job.name for job in server_def.cluster.job),
        tf.constant(0.0).device,
    ]
    with fake_tpu("v3-32", hosts=1):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="my-pod")
        tf.config.experimental_connect_to_cluster(resolver)
        topology = tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
        extended = strategy.extended
        out["master"] = resolver.master()
        out["topology"] = [topology.num_tasks, topology.num_tpus_per_task]
        out["replicas"] = [
            strategy.num_replicas_in_sync,
            extended.num_hosts,
            extended.num_replicas_per_host,
        ]
        out["all_reduce"] = replica_ids_summed(strategy)[0]
        out["children"] = _descendants()
        contexts = []
        strategy.distribute_datasets_from_function(_dataset_fn(contexts))
        out["input_contexts"] = contexts
        # The pod's checkpoint, restored into this one-host strategy.
        _, _, restored, _ = _train(strategy, 0)
        restored.restore(checkpoint).assert_existing_objects_matched()
        out["restored"] = [
            [float(v.numpy()[0, 0]) for v in strategy.experimental_local_results(restored.w)],
            [float(v.numpy()[0]) for v in strategy.experimental_local_results(restored.b)],
            int(restored.optimizer.iterations.numpy()),
        ]
        v1 = compat_distribute.TPUStrategy(
            FakeTPUClusterResolver("v3-32", hosts=1), steps_per_run=4
        )
        out["v1"] = [v1.num_replicas_in_sync, v1.extended.num_hosts, v1.extended.steps_per_run]
        out["v1_all_reduce"] = replica_ids_summed(v1)[0]
    return out


def _keras_fit(strategy=None):
    """Keras 3 `fit` of a small seeded model, 4 steps a call (the V1 shim's steps_per_run,
    through `keras_compile_kwargs`); the epoch losses and the weights."""
    import contextlib

    import keras
    import numpy as np
    import tensorflow as tf

    from compat_distribute import keras as cd_keras

    rng = np.random.RandomState(0)
    x = rng.randn(256, 4).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32") + 1.0
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(
                    8, activation="tanh", kernel_initializer=keras.initializers.GlorotUniform(1)
                ),
                keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(2)),
            ]
        )
        steps = (
            cd_keras.keras_compile_kwargs(strategy, model, on_unsupported="raise")
            if strategy
            else {"steps_per_execution": 4}
        )
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", **steps)
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(64, drop_remainder=True)
    history = model.fit(batches, epochs=5, verbose=0)
    return steps, history.history["loss"], [w.tolist() for w in model.get_weights()]


def _steps_to_the_end_of_data(strategy):
    """A `tf.function` step on each batch of a distributed dataset, looped until
    its data ends; each step's sum over the replicas."""
    import tensorflow as tf

    @tf.function
    def summed(batch):
        return strategy.reduce("SUM", strategy.run(tf.reduce_sum, args=(batch,)), axis=None)

    dataset = tf.data.Dataset.range(48).batch(16)
    return [int(summed(b)) for b in strategy.experimental_distribute_dataset(dataset)]


def keras_pod():
    """Keras 3 `fit` under the V1 shim on a v4-16 pod (2 hosts, 8 replicas), and on one
    device; then steps over a distributed dataset to its end. The program ends as a
    user's does (see `main`)."""
    import tensorflow as tf

    import compat_distribute
    from compat_distribute.testing import fake_tpu

    with fake_tpu("v4-16"):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="my-pod")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = compat_distribute.TPUStrategy(resolver, steps_per_run=4)
        return {
            "replicas": [strategy.num_replicas_in_sync, strategy.extended.num_hosts],
            "pod": _keras_fit(strategy),
            "one_device": _keras_fit(),
            "steps_to_the_end_of_data": _steps_to_the_end_of_data(strategy),
        }


def hold_pod():
    """Starts a v4-16 (2 hosts), says its hosts and directory, then waits to be killed."""
    from compat_distribute.testing import fake_tpu

    fake = fake_tpu("v4-16").start()
    print("HOSTS", fake.pod.directory, *fake.pod.pids, flush=True)
    print("RELAY", fake.pod.relay_pid or "none", flush=True)
    time.sleep(600)


PROGRAMS = {"pod": pod, "one_host": one_host, "keras_pod": keras_pod, "hold_pod": hold_pod}
# Programs that end as a user's program does: atexit handlers, then TensorFlow's
# own shutdown (the others end at once, having killed hosts on purpose).
ENDING_AS_A_USER_PROGRAM = {"keras_pod"}


def _machine_address():
    """This machine's first non-loopback IPv4 address, or None."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # Sends nothing: picks the route's source.
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") else address


def _connect(address, port):
    import socket

    try:
        socket.create_connection((address, port), timeout=5).close()
    except OSError as e:
        return type(e).__name__
    return "ok"


def _step_reading_the_client(strategy):
    """A step whose replicas all read a value on this process's device, so
    that the hosts call this process back; returns the all-reduced values."""
    import tensorflow as tf

    with tf.device("/job:localhost/replica:0/task:0/device:CPU:0"):
        base = tf.constant(100.0)

    @tf.function
    def step():
        def replica():
            context = tf.distribute.get_replica_context()
            mine = base + tf.cast(context.replica_id_in_sync_group, tf.float32)
            return context.all_reduce("SUM", mine)

        return strategy.run(replica)

    return lambda: [float(v) for v in strategy.experimental_local_results(step())]


def pod_network():
    """A v4-16 (2 hosts) on the default network: where its servers listen, a
    step that reads a value of this process on the hosts, a killed relay, and
    what stopping leaves. (A killed host behind the relay: the `pod` program.)"""
    import tensorflow as tf

    from compat_distribute.testing import fake_tpu

    out = {}
    fake = fake_tpu("v4-16").start()
    host_pids, relay_pid = fake.pod.pids, fake.pod.relay_pid
    out["relay"] = relay_pid is not None
    if relay_pid is None:  # The host network: the tests skip.
        fake.stop()
        return out
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    tf.config.experimental_connect_to_cluster(resolver)
    ports = [int(a.rsplit(":", 1)[1]) for a in resolver.cluster_spec().as_dict()["worker"]]
    strategy = tf.distribute.TPUStrategy(resolver)
    out["listening"] = {str(p): a for p, a in sorted(listening(set(ports)).items())}
    machine = _machine_address()
    out["machine_address"] = machine
    out["from_the_machine_address"] = [_connect(machine, p) for p in ports] if machine else []
    own = os.readlink("/proc/self/ns/net")
    out["namespaces"] = [os.readlink(f"/proc/{p}/ns/net") != own for p in host_pids + [relay_pid]]
    step = _step_reading_the_client(strategy)
    out["all_reduce"] = step()
    zygote = [fake.pod.zygote_pid] if fake.pod.zygote_pid else []  # Forked the hosts.
    out["children"] = sorted(host_pids + [relay_pid] + zygote) == _descendants()

    # The relay dies: no host can be reached, and the watchdog says why.
    os.kill(relay_pid, signal.SIGKILL)
    wait_for(lambda: fake.pod.failure is not None, WATCHDOG_S)
    out["relay_watchdog"] = [relay_pid, fake.pod.failure]
    failed_at = time.monotonic()
    try:
        step()
    except Exception as e:  # pylint: disable=broad-except
        out["dead_relay_step"] = type(e).__name__
    out["dead_relay_step_s"] = time.monotonic() - failed_at
    try:
        fake.pod.check()
    except Exception as e:  # pylint: disable=broad-except
        out["relay_check"] = [type(e).__name__, str(e).splitlines()[0], e.task_type]
    # SIGKILL is asynchronous: a host with many threads takes a moment to go.
    out["hosts_after_relay"] = wait_gone(host_pids, 5.0)

    cluster_dir = fake.pod.directory
    fake.stop()
    out["after_stop"] = [
        [p for p in host_pids + [relay_pid] if os.path.exists(f"/proc/{p}")],
        _descendants(),
        os.path.exists(cluster_dir),
        listening(set(ports)),
    ]
    return out


PROGRAMS["pod_network"] = pod_network


def main(programs):
    """`python FILE NAME [ARG]`: runs program NAME of `programs`, prints its RESULT line."""
    name, *args = sys.argv[1:]
    result = programs[name](*args)
    print("RESULT " + json.dumps(result), flush=True)
    if name not in ENDING_AS_A_USER_PROGRAM:
        _exit.end_process(0)  # atexit clean-up, then no wait on TensorFlow's teardown


if __name__ == "__main__":
    main(PROGRAMS)
