"""Device assignments on a fake TPU pod, run as a client process of its own.

`python pod_assignment_programs.py pod_assignments` starts one v3-32 (4 hosts
of 8 cores), builds TPUStrategies over several device assignments, and prints
one line, `RESULT <json>`, with what test_fake_tpu_pod_assignments checks.
Connecting to a pod changes the process's TensorFlow context for good, so this
never runs inside the test process.
"""


def _as_fake_device(tpu_device):
    """`DeviceAssignment.tpu_device`'s name, for the fake's cores (CPU devices)."""
    return "/job:worker/replica:0" + tpu_device.replace("/device:TPU:", "/device:CPU:")


def _layout(strategy, assignment):
    """Where the strategy put each replica's logical cores, beside what the assignment names."""
    extended = strategy.extended
    devices = extended._tpu_devices  # pylint: disable=protected-access
    return {
        "replicas": [
            strategy.num_replicas_in_sync,
            extended.num_hosts,
            extended.num_replicas_per_host,
        ],
        "cores": devices.tolist(),
        "named": [
            [
                _as_fake_device(assignment.tpu_device(r, c))
                for c in range(assignment.num_cores_per_replica)
            ]
            for r in range(assignment.num_replicas)
        ],
        "replica_devices": list(extended.worker_devices),
    }


def _fed(strategy):
    """Which pipeline fed each replica: pipeline p's k-th element is 100 * p + k.

    Also the input contexts, and the devices each replica's input and output were on.
    """
    import tensorflow as tf

    contexts = []

    def dataset_fn(context):
        contexts.append(
            [context.num_input_pipelines, context.input_pipeline_id, context.num_replicas_in_sync]
        )
        first = 100 * context.input_pipeline_id
        return tf.data.Dataset.range(first, first + 100).batch(1, drop_remainder=True)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    element = next(iterator)

    @tf.function
    def step(x):
        def replica(x):
            context = tf.distribute.get_replica_context()
            total = context.all_reduce("SUM", tf.cast(context.replica_id_in_sync_group, tf.int64))
            return x[0], total

        return strategy.run(replica, args=(x,))

    fed, totals = step(element)
    local = strategy.experimental_local_results
    return {
        "contexts": contexts,
        "fed": [int(v) for v in local(fed)],
        "input_devices": [v.device for v in local(element)],
        "output_devices": [v.device for v in local(fed)],
        "all_reduce": [int(v) for v in local(totals)],
    }


def _model_parallel(strategy, cores, core):
    """A step using the logical-device annotations, updating and reading a
    variable made on logical core `core`."""
    import tensorflow as tf

    with strategy.scope(), strategy.extended.experimental_logical_device(core):
        scale = tf.Variable(2.0, aggregation=tf.VariableAggregation.MEAN)

    @tf.function
    def step(x):
        def replica(x):
            x = strategy.experimental_split_to_logical_devices(x, [1, cores])
            x = strategy.experimental_assign_to_logical_device(x, core)
            x = strategy.experimental_replicate_to_logical_devices(x)
            scale.assign_add(1.0)
            return x * scale

        return strategy.run(replica, args=(x,))

    x = tf.reshape(tf.range(2 * cores, dtype=tf.float32), [2, cores])
    out = strategy.experimental_local_results(step(x))
    return {
        "variable_devices": [v.device for v in scale.values],
        "outputs": [v.numpy().tolist() for v in out],
        "expected": (x.numpy() * 3.0).tolist(),
    }


def _error(fn):
    try:
        fn()
    except Exception as e:  # pylint: disable=broad-except
        return [type(e).__name__, getattr(e, "message", str(e))]
    return None


def pod_assignments():
    import tensorflow as tf

    from compat_distribute.testing import fake_tpu
    from pod_programs import iterator_left_in_a_step

    # A client that names its own inter-op pool, smaller than a host's 8 cores need.
    tf.config.threading.set_inter_op_parallelism_threads(2)
    out = {}
    with fake_tpu("v3-32"):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="my-pod")
        tf.config.experimental_connect_to_cluster(resolver)
        out["iterator_left_in_a_step"] = iterator_left_in_a_step(tf.distribute.TPUStrategy(resolver))
        topology = tf.tpu.experimental.initialize_tpu_system(resolver)
        coordinates = topology.device_coordinates.tolist()
        out["coordinates"] = coordinates

        def strategy_of(assignment):
            return tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)

        # 2x2 slices: replicas of 4 cores (core 0 of a 2x2 block of chips), 2 a host.
        build = tf.tpu.experimental.DeviceAssignment.build
        slices = build(topology, computation_shape=[2, 2, 1, 1], num_replicas=8)
        strategy = strategy_of(slices)
        out["slices"] = {**_layout(strategy, slices), **_fed(strategy)}
        out["slices"]["model_parallel"] = _model_parallel(strategy, 4, 3)

        # A hand-made 2x2 slice across hosts 0 and 1: chips x=1..2, y=0..1.
        across = tf.tpu.experimental.DeviceAssignment(
            topology, [[[x, y, 0, 0] for y in (0, 1) for x in (1, 2)]]
        )
        strategy = strategy_of(across)
        out["across"] = {**_layout(strategy, across), **_fed(strategy)}
        out["across"]["model_parallel"] = _model_parallel(strategy, 4, 3)

        # Replicas of 16 cores, each spanning two hosts; one of all 32 cores.
        halves = build(topology, computation_shape=[4, 2, 1, 2], num_replicas=2)
        strategy = strategy_of(halves)
        out["halves"] = {**_layout(strategy, halves), **_fed(strategy)}
        out["halves"]["model_parallel"] = _model_parallel(strategy, 16, 4)
        whole = build(topology, computation_shape=[4, 4, 1, 2], num_replicas=1)
        strategy = strategy_of(whole)
        out["whole"] = {**_layout(strategy, whole), **_fed(strategy)}

        # TensorFlow's default build over 4 hosts: replicas go round the torus,
        # from host to host and back; and pairs of a chip's cores, more so.
        default = build(topology, num_replicas=32)
        strategy = strategy_of(default)
        out["default"] = {**_layout(strategy, default), **_fed(strategy)}
        pairs = build(topology, computation_shape=[1, 1, 1, 2], num_replicas=16)
        strategy = strategy_of(pairs)
        out["pairs"] = {**_layout(strategy, pairs), **_fed(strategy)}

        # What a pod refuses.
        out["too_big"] = _error(
            lambda: build(topology, computation_shape=[4, 4, 1, 2], num_replicas=2)
        )
        # Replica 1's logical core 0 is replica 0's logical core 1 (host 2's first core).
        twice = tf.tpu.experimental.DeviceAssignment(
            topology,
            [[coordinates[1][0], coordinates[2][0]], [coordinates[2][0], coordinates[3][0]]],
        )
        out["twice"] = _error(lambda: strategy_of(twice))
        four_cores = strategy_of(slices)
        out["split_16"] = _error(
            lambda: four_cores.experimental_split_to_logical_devices(tf.ones([2, 16]), [1, 16])
        )
    return out


PROGRAMS = {"pod_assignments": pod_assignments}

if __name__ == "__main__":
    import pod_programs

    pod_programs.main(PROGRAMS)
