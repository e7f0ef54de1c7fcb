"""Functions the test_cluster_* modules run inside local_cluster tasks.

Each task imports this module by name (the tests' directory is on the
parent's sys.path, which the tasks inherit).
"""

import os
import signal
import socket
import tempfile
import threading
import time

import numpy as np

from compat_distribute.testing import cluster


def task_info(tag):
    return {
        "task": cluster.current_task(),
        "pid": os.getpid(),
        "tf_config": os.environ["TF_CONFIG"],
        "env_mark": os.environ.get("CLUSTER_TEST_MARK"),
        "tag": tag,
        "network_namespace": os.readlink("/proc/self/ns/net"),
    }


def temp_dir_of_task():
    """The task's temp dir as Python's tempfile module sees it."""
    return tempfile.gettempdir()


def connect_to(address):
    """ "ok", or the error's type name, for a TCP connection to "host:port"."""
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        return type(e).__name__
    return "ok"


def print_and_return(text):
    print(f"{cluster.current_task()}: {text}")
    return text


def local_cpu_count():
    import tensorflow as tf

    # Once a strategy joined the cluster, every task's devices are listed.
    task_type, task_id = cluster.current_task()
    mine = f"/job:{task_type}/replica:0/task:{task_id}/"
    return sum(
        "/job:" not in d.name or mine in d.name for d in tf.config.list_logical_devices("CPU")
    )


def strategy_facts():
    s = cluster.worker_strategy()
    return {
        "task_type": s.cluster_resolver.task_type,
        "task_id": s.cluster_resolver.task_id,
        "should_checkpoint": s.extended.should_checkpoint,
        "num_replicas_in_sync": s.num_replicas_in_sync,
    }


def doubled_constant():
    import tensorflow as tf

    s = cluster.worker_strategy()
    result = s.run(lambda x: x * 2, args=(tf.constant(21.0),))
    return [float(v) for v in s.experimental_local_results(result)]


def all_reduce_of_replica_ids(use_shim):
    """Sum over replicas of replica_id + 1, from values_from_function."""
    import tensorflow as tf

    import compat_distribute

    s = cluster.worker_strategy(
        compat_distribute.MultiWorkerMirroredStrategy if use_shim else None
    )

    def step():
        values = s.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(ctx.replica_id_in_sync_group + 1.0)
        )
        return s.run(
            lambda v: tf.distribute.get_replica_context().all_reduce("sum", v), args=(values,)
        )

    # Raw TF only manages this eagerly; the shim also inside tf.function.
    step = tf.function(step) if use_shim else step
    return [float(v) for v in s.experimental_local_results(step())]


def documented_all_reduce_example(use_shim):
    """The ReplicaContext.all_reduce example of TF's Strategy.run docstring, verbatim."""
    import tensorflow as tf

    import compat_distribute

    strategy = cluster.worker_strategy(
        compat_distribute.MultiWorkerMirroredStrategy if use_shim else None
    )
    try:
        # --- verbatim from tf.distribute.Strategy.run, example 3 ---
        @tf.function
        def run():
            def value_fn(value_context):
                return tf.constant(value_context.replica_id_in_sync_group)

            distributed_values = strategy.experimental_distribute_values_from_function(value_fn)

            def replica_fn(input):
                return tf.distribute.get_replica_context().all_reduce("sum", input)

            return strategy.run(replica_fn, args=(distributed_values,))

        result = run()
        # ---
    except ValueError as e:
        return str(e).strip().splitlines()[-1].strip()  # Past tf.function's "in user code"
    return [int(v) for v in strategy.experimental_local_results(result)]


def all_reduce_sum(value):
    import tensorflow as tf

    s = cluster.worker_strategy()
    result = s.run(
        lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(value))
    )
    return [float(v) for v in s.experimental_local_results(result)]


# A tiny linear model: y = x @ W_TRUE + B_TRUE, global batch of 8 rows.
GLOBAL_BATCH = 8
LEARNING_RATE = 0.1
TRAIN_STEPS = 5
W_TRUE = np.array([[1.0], [-2.0], [0.5]], np.float32)
B_TRUE = 0.3


def training_data():
    x = np.random.default_rng(0).normal(size=(GLOBAL_BATCH, 3)).astype(np.float32)
    return x, (x @ W_TRUE + B_TRUE).astype(np.float32)


def train_linear(distributed):
    """Plain SGD, custom loop; each replica takes its slice of the global batch."""
    import tensorflow as tf

    strategy = cluster.worker_strategy() if distributed else tf.distribute.get_strategy()
    x_all, y_all = training_data()
    with strategy.scope():
        # MEAN: the update is identical on every replica after the all-reduce.
        w = tf.Variable(tf.zeros((3, 1)), aggregation=tf.VariableAggregation.MEAN)
        b = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)

    def replica_step():
        ctx = tf.distribute.get_replica_context()
        per_replica = GLOBAL_BATCH // ctx.num_replicas_in_sync
        start = ctx.replica_id_in_sync_group * per_replica
        x = tf.constant(x_all)[start : start + per_replica]
        y = tf.constant(y_all)[start : start + per_replica]
        with tf.GradientTape() as tape:
            # Scaled by the global batch, so the summed gradient is the mean.
            loss = tf.reduce_sum(tf.square(x @ w + b - y)) / GLOBAL_BATCH
        grads = ctx.all_reduce("sum", tape.gradient(loss, [w, b]))
        w.assign_sub(LEARNING_RATE * grads[0])
        b.assign_sub(LEARNING_RATE * grads[1])

    step = tf.function(lambda: strategy.run(replica_step))
    for _ in range(TRAIN_STEPS):
        step()
    return w.numpy().ravel().tolist() + [float(b.numpy())]


def raise_on_worker_1(message):
    print("about to fail")
    if cluster.current_task() == ("worker", 1):
        raise ValueError(message)
    return "fine"


def exit_on_worker_1():
    if cluster.current_task() == ("worker", 1):
        os._exit(3)
    time.sleep(60)


def hang_worker_1_in_sleep():
    """Worker 1 never builds its strategy; worker 0 waits for it in TF."""
    if cluster.current_task() == ("worker", 1):
        time.sleep(3600)
    return all_reduce_sum(1.0)


def sleep_forever():
    time.sleep(3600)


def stop_worker_1_then_all_reduce():
    """Worker 1 stops itself (SIGSTOP) before its all-reduce; worker 0 waits for it."""
    if cluster.current_task() == ("worker", 1):
        os.kill(os.getpid(), signal.SIGSTOP)
    return all_reduce_sum(1.0)


def checkpoint_then_kill_worker_1(path):
    """Both workers save (worker 1 to its own temporary directory); then worker
    1 is killed by SIGKILL before it can remove that directory."""
    import tensorflow as tf

    import compat_distribute
    from compat_distribute import checkpoint

    strategy = cluster.worker_strategy(compat_distribute.MultiWorkerMirroredStrategy)
    with strategy.scope():
        weights = tf.Variable(tf.fill([256, 256], 0.5))
    directory = checkpoint.checkpoint_dir_for(strategy, path)
    saved = tf.train.CheckpointManager(tf.train.Checkpoint(weights=weights), directory, 1).save()
    print(f"saved {saved} in {directory}: {sorted(os.listdir(directory))}", flush=True)
    if cluster.current_task() == ("worker", 1):
        os.kill(os.getpid(), signal.SIGKILL)
    return saved


def not_a_strategy():
    return "MultiWorkerMirroredStrategy"


def strategy_from_bad_factory():
    """The error text of worker_strategy with a factory that returns a string."""
    try:
        cluster.worker_strategy(not_a_strategy)
    except TypeError as e:
        return str(e)
    return "no error"


def scaled(array, factor):
    """The array times `factor`, and this task's id: a large value each way."""
    return cluster.current_task()[1], array * factor


def return_a_lock():
    import threading

    return threading.Lock()


def serve_until_exit(argv, conn):
    """A task main other than the worker's (a long-lived server, say): says
    Ready, writes its argv and $SERVER_MARK to its log, serves until Exit."""
    from compat_distribute.testing.cluster import protocol

    conn.send(protocol.Ready(os.getpid()))
    print("serving", *argv, os.environ.get("SERVER_MARK"), flush=True)
    while not isinstance(conn.recv(), protocol.Exit):
        pass
    print("exiting", flush=True)
    return 7


def ignore_exit(argv, conn):
    """A task main that says Ready, then ignores Exit (blocked reading its
    connection, as a main stuck in a call is); with --ignore-sigterm it also
    ignores SIGTERM; with --blocked-in-c it waits inside a C call that never
    returns to Python on a signal (a mutex it holds, locked again), as a main
    waiting inside a TensorFlow op does, so no Python signal handler runs."""
    from compat_distribute.testing.cluster import protocol

    if "--ignore-sigterm" in argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready, deaf to Exit", flush=True)
    conn.send(protocol.Ready(os.getpid()))
    if "--blocked-in-c" in argv:
        import ctypes

        libc = ctypes.CDLL(None)
        mutex = ctypes.create_string_buffer(64)  # PTHREAD_MUTEX_INITIALIZER: zeros
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)  # A normal mutex locked again: waits for good.
    while True:
        conn.recv()


def exit_on_worker_1_once(marker):
    """Worker 1 exits with code 3 the first time (a file `marker` says it did)."""
    if cluster.current_task() == ("worker", 1) and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(3)
    return cluster.current_task()


def raise_tf_error_on_worker_1():
    import tensorflow as tf

    if cluster.current_task() == ("worker", 1):
        raise tf.errors.InvalidArgumentError(None, None, "shapes [2] and [3] differ")
    return "fine"


def raise_on_worker_1_once(marker):
    """Worker 1 raises the first time (a file `marker` says it did)."""
    if cluster.current_task() == ("worker", 1) and not os.path.exists(marker):
        open(marker, "w").close()
        raise ValueError("first try fails")
    return cluster.current_task()


def sleep_then_task(seconds):
    time.sleep(seconds)
    return cluster.current_task()


def answer_then_die_on_worker_1(seconds):
    """Worker 1 answers at once and is killed 0.5 s later; worker 0 sleeps `seconds`."""
    if cluster.current_task() == ("worker", 1):
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
        return "answered"
    time.sleep(seconds)
    return "slept"


def exit_on_chief(code):
    if cluster.current_task() == ("chief", 0):
        os._exit(code)
    time.sleep(60)


def ps_training_through_a_worker_restart(worker_pid, steps):
    """Parameter-server training from the chief: `steps` steps, then worker 0
    (pid `worker_pid`) is killed, as a preempted worker, and `steps` more are
    scheduled; join() returns once the worker is back and has run them.
    Returns the step counter on the parameter server after each half."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        counter = tf.Variable(0.0)

    @tf.function
    def step():
        counter.assign_add(1.0)

    for _ in range(steps):
        coordinator.schedule(step)
    coordinator.join()
    before = float(counter.numpy())
    os.kill(worker_pid, signal.SIGKILL)
    for _ in range(steps):
        coordinator.schedule(step)
    coordinator.join()
    return before, float(counter.numpy()), len(strategy.extended.parameter_devices)


def job_facts():
    """This task's view of the cluster, as TensorFlow's resolver reads TF_CONFIG."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return resolver.task_type, resolver.task_id, sorted(resolver.cluster_spec().jobs)


def build_strategy_then_sleep(seconds):
    """Builds MultiWorkerMirroredStrategy itself (not through worker_strategy), then sleeps."""
    import tensorflow as tf

    tf.distribute.MultiWorkerMirroredStrategy()
    print("strategy built", flush=True)
    time.sleep(seconds)


def exit_with(code):
    """sys.exit in worker 1, as a program ends its process."""
    import sys

    if cluster.current_task() == ("worker", 1):
        sys.exit(code)
    time.sleep(60)
