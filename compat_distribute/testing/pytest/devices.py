"""The logical CPU devices of a session, created once per process before any test runs.

A given count before the first conftest.py; else what the collected tests need.
"""

import os

from compat_distribute.testing import devices as virtual_devices
from compat_distribute.testing.pytest import markers
from compat_distribute.testing.pytest import options

# Fixtures that build a strategy on the harness's devices: a run using one gets
# at least the fake TPU's core count.
STRATEGY_FIXTURES = ("strategy", "tpu_strategy", "tpu_resolver", "mirrored_strategy")


def _create(count, what):
    """Creates `count` logical CPUs; returns why not (a message) when it came too late."""
    try:
        virtual_devices.set_virtual_devices(count)
    except RuntimeError as e:
        return f"{what}: {e}"
    return None


def set_up_before_conftests(config):
    """Creates a given count before pytest imports the initial conftest.py files
    (the rootdir's and the test paths'): one that runs TensorFlow at import would
    otherwise start it with one CPU. A bad setting is left to `set_up_given`,
    which reports it; an xdist controller creates none."""
    parsed = config.known_args_namespace  # pytest's parse of the options known so far
    controller = "PYTEST_XDIST_WORKER" not in os.environ and (
        getattr(parsed, "numprocesses", None) or getattr(parsed, "dist", "no") != "no"
    )
    try:
        settings = options.from_config(config, parsed)
    except options.SettingError:
        return
    if settings.tf_devices and not controller:
        _create(settings.tf_devices, settings.shown("tf_devices"))  # A problem: set_up_given.


def set_up_given(session):
    """At configure time: the TPU, and the devices a setting asks for, in the order each needs."""
    settings = session.settings
    if not settings.any_given:
        return  # Nothing chosen yet; collection says what the run needs.
    if settings.tpu == "fake":
        session.tpu()  # The fake checks the count before any device exists.
    if settings.tf_devices and session.role.runs_tests and session.usable:
        problem = _create(settings.tf_devices, settings.shown("tf_devices"))
        if problem:
            session.stop(problem)
    session.tpu()  # After the devices: connecting to a real TPU starts TensorFlow.


def needed(session, items):
    """(count, why): the logical CPUs the selected `items` need, from their markers
    and the fixtures they use; count 0 when they need none."""
    needs = []
    marked = [markers.count_problem(item, "multi_device")[0] for item in items]
    largest = max((n for n in marked if n is not None), default=0)
    if largest > 1:
        needs.append((largest, f"the largest multi_device(n) is {largest}"))
    # Items of other plugins (a linter's, a YAML file's) may have no fixtures.
    uses = (name for item in items for name in getattr(item, "fixturenames", ()))
    if any(name in STRATEGY_FIXTURES for name in uses):
        cores = session.tpu().local_cores
        if cores:
            needs.append((cores, f"the fake TPU has {cores} cores"))
    return max((n for n, _ in needs), default=0), "; ".join(why for _, why in needs)


def set_up_needed(session, items, collect_only):
    """After collection: creates the devices the collected `items` need, when no count was given."""
    if session.settings.tf_devices or collect_only or not session.usable:
        return
    count, why = needed(session, items)  # An xdist controller collects none.
    if count <= 1:
        return
    problem = _create(count, f"the tests need {count} logical CPU devices ({why})")
    if problem:
        enough = max(count, session.tpu().local_cores)  # A given count must hold the fake too.
        session.stop(
            f"{problem}\nHere TensorFlow started during collection (a test module or "
            f"conftest.py ran TensorFlow at import): pass --tf-devices={enough} (or set it in "
            f"the ini file, or COMPAT_DISTRIBUTE_TF_DEVICES={enough}), which creates the "
            f"devices before pytest imports any conftest.py or test module."
        )
        return
    session.devices = (count, why)
