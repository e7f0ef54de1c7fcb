"""A task main whose module runs a TensorFlow op at import: the zygote that
imports it must refuse to fork (tests/cluster/test_cluster_zygote.py)."""

import tensorflow as tf

from cluster_tasks import serve_until_exit

ONE = float(tf.constant(1.0))  # Makes the eager context in whoever imports this.

__all__ = ["ONE", "serve_until_exit"]
