"""A pod host's call is instantiated without Grappler, unless the user set its options."""

import tensorflow as tf

from compat_distribute.testing import _tf


def _rewrite_options(config):
    return config.graph_options.rewrite_options


def test_default_config_turns_the_graph_optimizer_off():
    given = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    config = _tf.without_graph_optimizer(given)
    assert _rewrite_options(config).disable_meta_optimizer is True
    assert config.allow_soft_placement is True
    # A copy: the caller's config is left as it was.
    assert _rewrite_options(given).disable_meta_optimizer is False


def test_user_options_are_kept_unchanged():
    # As tf.config.optimizer.set_experimental_options({"constant_folding": False}) sets them.
    given = tf.compat.v1.ConfigProto()
    _rewrite_options(given).constant_folding = _rewrite_options(given).OFF
    _rewrite_options(given).remapping = _rewrite_options(given).ON
    config = _tf.without_graph_optimizer(given)
    assert config == given
    assert _rewrite_options(config).disable_meta_optimizer is False


def test_call_ops_built_meanwhile_carry_the_config():
    inner = tf.function(lambda x: x + 1.0, autograph=False)

    def outer(x):
        with _tf.calls_without_graph_optimizer():
            return inner(x)

    graph = tf.function(outer, autograph=False).get_concrete_function(tf.TensorSpec([], tf.float32)).graph
    (call,) = [op for op in graph.get_operations() if op.type in ("PartitionedCall", "StatefulPartitionedCall")]
    config = tf.compat.v1.ConfigProto.FromString(call.get_attr("config_proto"))
    assert _rewrite_options(config).disable_meta_optimizer is True
    # Only meanwhile: the context's options are back.
    after = tf.compat.v1.ConfigProto.FromString(_tf.context().function_call_options.config_proto_serialized)
    assert _rewrite_options(after).disable_meta_optimizer is False
