"""The main of a task that hosts a `tf.distribute.Server` (runs inside the task).

Internal: not part of the public API; the names below may change.

Started by `bootstrap` (TF_CONFIG set, `--devices D`), which armed the
stack dump and said `Alive`. `main` starts a gRPC server for its task of the
TF_CONFIG cluster with D CPU devices (a server takes its devices from its
config; the process's logical device configuration does not reach it), says
`Ready`, then serves a client that connects to the cluster
(`tf.config.experimental_connect_to_cluster`) until `Exit` or until the
launcher's end of the connection closes. This is one host of a fake TPU pod.
"""

import argparse
import os
import sys
import traceback

from compat_distribute._tf_config import parse_tf_config
from compat_distribute.testing import devices as devices_lib
from compat_distribute.testing.cluster import protocol

__all__ = ["main", "start_server"]


def start_server(tf_config, devices, boot_job):
    """A server for this task; under the job name `boot_job` when given, the
    addresses of its TF_CONFIG job alone (clients then name the job as they will)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    devices_lib.size_clients_inter_op_pools(devices)
    cluster = {job: list(addresses) for job, addresses in tf_config.cluster.items()}
    if boot_job:
        cluster = {boot_job: cluster[tf_config.task_type]}
    return tf.distribute.Server(
        tf.train.ClusterSpec(cluster),
        job_name=boot_job or tf_config.task_type,
        task_index=tf_config.task_id,
        # Its devices share the server's inter-op pool, sized as set_virtual_devices sizes it.
        config=tf.compat.v1.ConfigProto(
            device_count={"CPU": devices},
            inter_op_parallelism_threads=devices_lib.config_inter_op_threads(devices),
        ),
        protocol="grpc",
        start=True,
    )


def main(argv, conn):
    """Serves until told to exit; returns the exit status."""
    parser = argparse.ArgumentParser(prog="local_cluster server")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--boot-job", default="")
    flags = parser.parse_args(argv)
    try:
        server = start_server(
            parse_tf_config(os.environ["TF_CONFIG"]), flags.devices, flags.boot_job
        )
    except BaseException:  # pylint: disable=broad-except
        conn.send(protocol.StartupFailed(traceback.format_exc()))
        return 1
    conn.send(protocol.Ready(os.getpid()))
    try:
        while not isinstance(conn.recv(), protocol.Exit):
            pass
    except EOFError:  # The launcher went away.
        pass
    del server
    sys.stdout.flush()
    sys.stderr.flush()
    # A server cannot be stopped in TensorFlow, and destroying one may block
    # on a client's pending calls: leave without running destructors.
    os._exit(0)
