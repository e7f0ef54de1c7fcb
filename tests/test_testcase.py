"""compat_distribute.testing.testcase.TestCase, for absltest users."""

import pytest
import tensorflow as tf

from compat_distribute.testing import _settings
from compat_distribute.testing import testcase
from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY


def _sum_of_replica_ids_plus_one(strategy):
    @tf.function  # TPUStrategy.run, real or fake, refuses pure eager functions.
    def step():
        def replica():
            ctx = tf.distribute.get_replica_context()
            return tf.cast(ctx.replica_id_in_sync_group, tf.int32) + 1

        return strategy.reduce("SUM", strategy.run(replica), axis=None)

    return int(step())


class SessionTestCaseTest(testcase.TestCase):
    """Runs in this pytest session (8 CPUs, no settings): the fake's default topology."""

    # tf.test.TestCase's deprecated `test_session` helper is no test; keep
    # pytest from collecting it (and reporting it skipped).
    test_session = None
    strategies = []

    def test_fake_v3_8(self):
        self.assertEqual(self.tpu_backend.describe(), f"fake ({DEFAULT_TOPOLOGY}, 8 cores on CPU)")
        self.assertEqual(self.tpu_strategy.num_replicas_in_sync, 8)
        self.assertEqual(_sum_of_replica_ids_plus_one(self.tpu_strategy), 36)
        self.strategies.append(self.tpu_strategy)

    def test_strategy_built_once_per_class(self):
        self.assertIs(self.tpu_strategy, self.tpu_strategy)
        self.assertIs(self.tpu_resolver, self.tpu_strategy.cluster_resolver)
        self.strategies.append(self.tpu_strategy)
        self.assertLen({id(s) for s in self.strategies}, 1)


def test_bad_environment_value_fails_set_up_class(monkeypatch):
    monkeypatch.setenv("COMPAT_DISTRIBUTE_TPU", "two words")

    class Bad(testcase.TestCase):
        pass

    with pytest.raises(_settings.SettingError) as raised:
        Bad.setUpClass()
    assert str(raised.value) == (
        "--tpu: expected 'fake', 'auto' or the name of a TPU (no spaces), got 'two words' "
        "(from environment variable COMPAT_DISTRIBUTE_TPU)"
    )


@pytest.mark.parametrize(
    "env, source",
    [
        ({"COMPAT_DISTRIBUTE_TF_DEVICES": "4"}, "environment variable COMPAT_DISTRIBUTE_TF_DEVICES"),
        (
            {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
            "--xla_force_host_platform_device_count in environment variable XLA_FLAGS",
        ),
    ],
    ids=["env", "xla-flags"],
)
def test_fewer_devices_than_the_fake_has_cores_fails_first_use(monkeypatch, env, source):
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    class TooFew(testcase.TestCase):
        def test_nothing(self):
            pass

    TooFew.setUpClass()  # The runtime already has 8 CPUs: 4 are there.
    case = TooFew("test_nothing")
    with pytest.raises(_settings.SettingError) as raised:
        case.tpu_strategy  # pylint: disable=pointless-statement
    assert str(raised.value).startswith(
        f"--tf-devices=4 (from {source}) is fewer devices than the 8 cores of the fake TPU's "
        f"topology {DEFAULT_TOPOLOGY} (from the default), which needs one device per core. "
        f"Pass --tf-devices=8 or more"
    )
    TooFew.tearDownClass()


def test_absltest_program_reads_the_environment(run_python):
    result = run_python(
        """
        import tensorflow as tf
        from compat_distribute.testing import testcase

        class V4Test(testcase.TestCase):
            def test_replicas(self):
                self.assertEqual(len(tf.config.list_logical_devices("CPU")), 6)
                self.assertEqual(self.tpu_backend.describe(), "fake (v4-8, 4 cores on CPU)")
                self.assertEqual(self.tpu_strategy.num_replicas_in_sync, 4)
                print("replicas", self.tpu_strategy.num_replicas_in_sync, flush=True)

        if __name__ == "__main__":
            tf.test.main()
        """,
        env={
            "COMPAT_DISTRIBUTE_TF_DEVICES": "6",
            "COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY": "v4-8",
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "replicas 4" in result.stdout
    # tf.test.TestCase's deprecated test_session is the second test, skipped.
    assert "Ran 2 tests" in result.stderr and "OK (skipped=1)" in result.stderr
