"""The TPU system, its topology, device assignments and the resolver, as TPU code sees them."""

import logging
import re
from unittest import mock

import pytest
import tensorflow as tf
from tensorflow.python.platform import tf_logging

from conformance_support import by_design
from conformance_support import core_coordinates
from conformance_support import device_names_differ
from conformance_support import strategy_on


def test_second_initialization_warns_that_variables_may_be_lost(tpu_resolver, caplog):
    """Initialising the TPU system again calls TF's `logging.warning` with "already been initialized".

    TF: tpu_strategy_test.py TPUTest.test_multiple_initialize_system
    """
    tf.tpu.experimental.initialize_tpu_system(tpu_resolver)
    with mock.patch.object(tf_logging, "warning", wraps=tf_logging.warning) as warning:
        with caplog.at_level(logging.WARNING, logger="tensorflow"):
            tf.tpu.experimental.initialize_tpu_system(tpu_resolver)
    assert re.search("already been initialized", str(warning.call_args)), warning.call_args
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "has already been initialized. Reinitializing the TPU can cause previously created "
        "variables on TPU to be lost." in w
        for w in warnings
    ), warnings


def test_one_core_assignment_names_core_zero_of_task_zero(topology):
    """A one-core assignment has one replica of one core: TPU 0 and CPU 0 of task 0.

    TF: tpu_strategy_test.py DeviceAssignmentTest.test_core_assignment
    TF: tpu_strategy_test.py DeviceAssignmentTest.test_device_assignment_constants
    """
    for core_assignment in ([[core_coordinates(topology, 0)]], [[[0, 0, 0, 0]]]):
        assignment = tf.tpu.experimental.DeviceAssignment(topology, core_assignment=core_assignment)
        assert assignment.core_assignment.tolist() == [[[0, 0, 0, 0]]]
        assert (assignment.num_replicas, assignment.num_cores_per_replica) == (1, 1)
        assert assignment.tpu_device() == "/task:0/device:TPU:0"
        assert assignment.host_device() == "/task:0/device:CPU:0"


def test_strategy_on_one_core_has_one_host_and_one_replica(tpu_resolver, topology):
    """A strategy on one core has 1 host, 1 replica, 1 replica per host.

    TF: tpu_strategy_test.py DeviceAssignmentTest.test_device_assignment_strategy_properties
    """
    strategy = strategy_on(tpu_resolver, topology, [0])
    assert strategy.extended.num_hosts == 1
    assert strategy.num_replicas_in_sync == 1
    assert strategy.extended.num_replicas_per_host == 1


def test_strategy_has_one_replica_per_core(tpu_strategy, tpu_resolver):
    """The strategy has one replica per core of the slice (a host's cores times its hosts).

    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_num_replicas_in_sync
    """
    # num_accelerators() counts one host's cores.
    cores = tpu_resolver.num_accelerators()["TPU"] * tpu_strategy.extended.num_hosts
    assert tpu_strategy.num_replicas_in_sync == cores
    assert len(tpu_strategy.extended.worker_devices) == cores


@pytest.mark.multi_device(2)  # two cores (counted on tpu_strategy)
@pytest.mark.usefixtures("tpu_strategy")
@device_names_differ
def test_subset_strategies_run_on_the_cores_they_name(tpu_resolver, topology):
    """A one-core strategy on core 0 has the one worker device core 0; one on core 1, core 1.

    TF: tpu_strategy_test.py TPUStrategyTest.test_worker_devices_on_subset_cores
    """
    first = strategy_on(tpu_resolver, topology, [0])
    second = strategy_on(tpu_resolver, topology, [1])
    assert len(first.extended.worker_devices) == 1
    assert first.extended.worker_devices[0].endswith(":0")
    assert second.extended.worker_devices[0].endswith(":1")


@by_design(
    "cores are virtual CPU devices (of this process, or of a pod's hosts), so device names "
    "say CPU; code that places ops by index works the same"
)
def test_replica_devices_are_tpu_cores(tpu_strategy, on_fake):
    """The replicas' devices are TPU cores (`device:TPU:k`), host by host.

    TF: tpu_strategy_test.py DeviceAssignmentTest.test_variables_mismatched_device_assignment
    """
    device_type = "CPU" if on_fake else "TPU"
    per_host = tpu_strategy.extended.num_replicas_per_host
    assert [d.rsplit("/", 2)[1:] for d in tpu_strategy.extended.worker_devices] == [
        [f"task:{k // per_host}", f"device:{device_type}:{k % per_host}"]
        for k in range(tpu_strategy.num_replicas_in_sync)
    ]


def test_cluster_resolver_is_the_strategys_own(tpu_strategy, tpu_resolver):
    """`strategy.cluster_resolver` is the resolver it was built from, with the resolver API.

    TF: strategy_common_test.py StrategyClusterResolverTest.testClusterResolverProperty
    """
    with tpu_strategy.scope():
        assert tpu_strategy.cluster_resolver is tpu_resolver
    for member in ("cluster_spec", "master", "num_accelerators", "task_id", "task_type"):
        assert hasattr(tpu_resolver, member), member


def test_update_config_proto_copies_the_cluster_and_isolates_sessions(tpu_strategy, monkeypatch):
    """`update_config_proto` copies the resolver's cluster and sets isolate_session_state.

    TF: tpu_strategy_test.py TPUStrategyDistributionTest.test_update_config_proto
    """
    cluster = tf.train.ClusterSpec({"worker": ["host-a:8470", "host-b:8470"]})
    monkeypatch.setattr(tpu_strategy.cluster_resolver, "cluster_spec", lambda: cluster)
    config = tpu_strategy.update_config_proto(tf.compat.v1.ConfigProto())
    assert config.cluster_def == cluster.as_cluster_def()
    assert config.isolate_session_state
    # The strategy's own session config gets the same (TF1's configure()).
    session_config = tf.compat.v1.ConfigProto()
    tpu_strategy.extended._configure(session_config)  # pylint: disable=protected-access
    assert session_config.cluster_def == cluster.as_cluster_def()
    assert session_config.isolate_session_state

