"""A test module that runs a TensorFlow op at its top level: a task that
imports it starts TensorFlow's runtime before its function can build a
multi-worker strategy (tests/cluster/test_cluster_output.py)."""

import tensorflow as tf

from compat_distribute.testing import cluster

ONES = tf.ones([2])  # The op at the top level.


def replicas():
    return cluster.worker_strategy().num_replicas_in_sync
