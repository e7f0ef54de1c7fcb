"""fake_tpu() switches TensorFlow's graph optimizer (Grappler) off while started,
unless the user set its options or COMPAT_DISTRIBUTE_FAKE_TPU_GRAPPLER=on."""

import pytest
import tensorflow as tf

from compat_distribute import _env
from compat_distribute.testing import _tf
from compat_distribute.testing import fake_tpu

ENV = "COMPAT_DISTRIBUTE_FAKE_TPU_GRAPPLER"


def call_config():
    """The config a function call made now carries: what its instantiation reads."""
    serialized = _tf.context().function_call_options.config_proto_serialized
    return tf.compat.v1.ConfigProto.FromString(serialized)


def meta_optimizer_off():
    options = tf.config.optimizer.get_experimental_options()
    assert options["disable_meta_optimizer"] == call_config().graph_options.rewrite_options.disable_meta_optimizer
    return options["disable_meta_optimizer"]


@pytest.fixture(name="user_options")
def user_options_fixture():
    """Sets the user's Grappler options for one test; afterwards none are set again."""
    set_by_user = _tf.context()._optimizer_experimental_options  # pylint: disable=protected-access
    assert not set_by_user, set_by_user
    yield tf.config.optimizer.set_experimental_options
    set_by_user.clear()
    _tf.context().function_call_options = None


def test_grappler_is_off_inside_fake_tpu_and_as_before_after():
    before = call_config().SerializeToString()
    assert not meta_optimizer_off()
    with fake_tpu("v3-8"):
        assert meta_optimizer_off()
    assert not meta_optimizer_off()
    assert call_config().SerializeToString() == before
    assert _tf.context()._optimizer_experimental_options == {}  # pylint: disable=protected-access


def test_nested_and_started_fakes_keep_grappler_off_until_the_outer_stops():
    outer = fake_tpu("v3-8").start()
    try:
        assert meta_optimizer_off()
        with fake_tpu("v4-8"):
            assert meta_optimizer_off()
        assert meta_optimizer_off()  # the inner fake found it off, and left it so
    finally:
        outer.stop()
    assert not meta_optimizer_off()
    outer.stop()  # a second stop changes nothing
    assert not meta_optimizer_off()


@pytest.mark.parametrize(
    "options",
    [{"constant_folding": False, "min_graph_nodes": -1}, {"disable_meta_optimizer": False}],
)
def test_the_users_grappler_options_are_kept_untouched(user_options, options):
    user_options(options)
    before = tf.config.optimizer.get_experimental_options()
    with fake_tpu("v3-8"):
        assert tf.config.optimizer.get_experimental_options() == before
        assert not meta_optimizer_off()
    assert tf.config.optimizer.get_experimental_options() == before
    assert _tf.context()._optimizer_experimental_options == options  # pylint: disable=protected-access


def test_an_option_the_user_sets_inside_the_fake_stays_after_it(user_options):
    with fake_tpu("v3-8"):
        user_options({"constant_folding": False})
    assert not meta_optimizer_off()
    assert tf.config.optimizer.get_experimental_options()["constant_folding"] is False


def test_the_setting_on_leaves_grappler_on(monkeypatch):
    monkeypatch.setenv(ENV, "on")
    with fake_tpu("v3-8"):
        assert not meta_optimizer_off()
    monkeypatch.setenv(ENV, "auto")
    with fake_tpu("v3-8"):
        assert meta_optimizer_off()


def test_a_bad_setting_fails_start_before_anything_is_routed(monkeypatch):
    monkeypatch.setenv(ENV, "off")
    fake = fake_tpu("v3-8")
    with pytest.raises(_env.SettingError) as raised:
        fake.start()
    assert str(raised.value).startswith(
        "COMPAT_DISTRIBUTE_FAKE_TPU_GRAPPLER must be one of 'auto', 'on'; got 'off'. "
    )
    assert not fake.active
    assert not meta_optimizer_off()
    assert tf.distribute.cluster_resolver.TPUClusterResolver is not fake._resolver_class  # pylint: disable=protected-access
