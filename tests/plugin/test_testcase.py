"""compat_distribute.testing.testcase.TestCase, for absltest users."""

import pytest
import tensorflow as tf

from compat_distribute.testing.pytest import options
from compat_distribute.testing import testcase
from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY
from compat_distribute.testing._fake_tpu import topologies


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

    with pytest.raises(options.SettingError) as raised:
        Bad.setUpClass()
    assert str(raised.value) == (
        "--tpu: expected 'fake', 'auto' or the name of a TPU (no spaces), got 'two words' "
        "(from environment variable COMPAT_DISTRIBUTE_TPU)"
    )


def test_a_host_count_the_topology_lacks_fails_set_up_class(monkeypatch):
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY", "v3-32")
    monkeypatch.setenv("COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS", "2")

    class Bad(testcase.TestCase):
        pass

    with pytest.raises(options.SettingError) as raised:
        Bad.setUpClass()
    with pytest.raises(ValueError) as fake_says:
        topologies.host_count("v3-32", 2)
    assert str(raised.value) == (
        "--fake-tpu-hosts=2 (from environment variable COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS) does "
        "not fit --fake-tpu-topology=v3-32 (from environment variable "
        f"COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY): {fake_says.value} Leave --fake-tpu-hosts unset "
        "(None) for the topology's own count."
    )
    assert "hosts must be None or 1 (every core in this process) or 4 (its hosts)" in str(
        raised.value
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
    with pytest.raises(options.SettingError) as raised:
        case.tpu_strategy  # pylint: disable=pointless-statement
    assert str(raised.value).startswith(
        f"--tf-devices=4 (from {source}) is fewer devices than the 8 cores of the fake TPU's "
        f"topology {DEFAULT_TOPOLOGY} (from the default), which needs one device per core. "
        f"Pass --tf-devices=8 or more"
    )
    TooFew.tearDownClass()


def test_absltest_program_reads_the_environment(run_python):
    # A v3-32 on one host: its 32 cores in this process, on 34 devices asked for.
    result = run_python(
        """
        import os

        import tensorflow as tf
        from compat_distribute.testing import testcase

        class PodOnOneHostTest(testcase.TestCase):
            def test_replicas(self):
                self.assertEqual(len(tf.config.list_logical_devices("CPU")), 34)
                self.assertEqual(
                    self.tpu_backend.describe(), "fake (v3-32 on 1 host, 32 cores on CPU)"
                )
                self.assertIsNone(self.tpu_resolver.pod)
                strategy = self.tpu_strategy
                extended = strategy.extended
                self.assertEqual(
                    (extended.num_hosts, extended.num_replicas_per_host), (1, 32)
                )

                @tf.function
                def step():
                    def replica():
                        context = tf.distribute.get_replica_context()
                        return context.all_reduce("SUM", context.replica_id_in_sync_group)

                    return strategy.run(replica)

                summed = {int(v) for v in strategy.experimental_local_results(step())}
                print("replicas", strategy.num_replicas_in_sync, "sum", summed,
                      "children", children(), flush=True)

        def children():
            # This process's children (a pod's hosts would be).
            found = []
            for name in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{name}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[1] == str(os.getpid()):
                            found.append(int(name))
                except OSError:  # Gone meanwhile.
                    pass
            return found

        if __name__ == "__main__":
            tf.test.main()
        """,
        env={
            "COMPAT_DISTRIBUTE_TF_DEVICES": "34",
            "COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY": "v3-32",
            "COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS": "1",
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"replicas 32 sum {{{sum(range(32))}}} children []" in result.stdout
    # tf.test.TestCase's deprecated test_session is the second test, skipped.
    assert "Ran 2 tests" in result.stderr and "OK (skipped=1)" in result.stderr
