"""local_cluster's arguments, TF_CONFIG parsing and port picking: bad input is
refused with a clear error before any process starts."""

import functools
import json
import socket
import sys
import threading
import types

import cluster_tasks as tasks
import pytest
from cluster_checks import descendants

from compat_distribute.testing.cluster import ClusterError
from compat_distribute.testing.cluster import LaunchHooks
from compat_distribute.testing.cluster import PortPicker
from compat_distribute.testing.cluster import current_task
from compat_distribute.testing.cluster import local_cluster
from compat_distribute.testing.cluster import parse_tf_config
from compat_distribute.testing.cluster import worker_strategy


class _Stepper:
    def step(self):
        return 1


def _closure_maker():
    def nested():
        return 1

    return nested


@pytest.mark.parametrize(
    "fn, message",
    [
        (
            lambda: 1,
            r"fn is a lambda \(test_cluster_arguments:.*<lambda>\); a worker process cannot import a lambda by name",
        ),
        (
            _closure_maker(),
            r"fn test_cluster_arguments:_closure_maker.<locals>.nested is defined inside another function",
        ),
        (
            _Stepper().step,
            r"fn <bound method _Stepper.step .*> \(method\) is not reachable as test_cluster_arguments:_Stepper.step",
        ),
        (functools.partial(tasks.task_info, "x"), r"fn .* \(partial\) has no __module__/__qualname__"),
        (42, r"fn must be a module-level function; got 42 \(int\)\. Define fn with `def`"),
    ],
)
def test_fn_that_a_worker_cannot_import_is_refused_before_any_process(fn, message):
    before = descendants()
    c = local_cluster(2)
    with pytest.raises((ValueError, TypeError), match=message):
        c.run(fn)
    assert descendants() <= before and not c.running


def test_fn_from_an_unimportable_main_is_refused(monkeypatch):
    fake_main = types.ModuleType("__main__")  # As in `python -c` or a REPL: no file.
    exec("def step():\n    return 1\n", fake_main.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    with pytest.raises(
        ValueError, match=r"fn step is defined in __main__ \(an interactive session"
    ):
        local_cluster(2).run(fake_main.step)


def test_unpicklable_args_are_refused():
    with pytest.raises(TypeError, match="args and kwargs for cluster_tasks:task_info must pickle"):
        local_cluster(2).run(tasks.task_info, threading.Lock())


def test_run_before_start_is_refused():
    with pytest.raises(
        ClusterError, match=r"not running: use `with local_cluster\(...\) as cluster:`"
    ):
        local_cluster(2).run(tasks.task_info, "x")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"num_workers": 0},
            ValueError,
            r"num_workers must be a positive int \(>= 1\); got 0 \(int\)",
        ),
        ({"num_workers": "2"}, TypeError, r"num_workers must be a positive int; got '2' \(str\)"),
        (
            {"num_workers": True},
            TypeError,
            r"num_workers must be a positive int; got True \(bool\)",
        ),
        (
            {"num_workers": 65},
            ValueError,
            r"num_workers must be at most 64 \(each worker is a process that imports "
            r"TensorFlow\); got 65. Ask for the workers the test needs",
        ),
        (
            {"devices_per_worker": 257},
            ValueError,
            r"devices_per_worker must be at most 256 .*; got 257. Ask for the virtual CPU",
        ),
        (
            {"devices_per_worker": 0},
            ValueError,
            r"devices_per_worker must be a positive int \(>= 1\); got 0",
        ),
        (
            {"devices_per_worker": 1.5},
            TypeError,
            r"devices_per_worker must be a positive int; got 1.5",
        ),
        (
            {"timeout": 0},
            ValueError,
            r"timeout must be a finite number of seconds > 0; got 0 \(int\)",
        ),
        (
            {"timeout": -3.0},
            ValueError,
            r"timeout must be a finite number of seconds > 0; got -3.0",
        ),
        (
            {"timeout": float("nan")},
            ValueError,
            r"timeout must be a finite number of seconds > 0; got nan",
        ),
        ({"timeout": "10"}, TypeError, r"timeout must be a number of seconds; got '10' \(str\)"),
        ({"start_timeout": 0}, ValueError, r"start_timeout must be a finite number of seconds > 0"),
        ({"has_chief": 1}, TypeError, r"has_chief must be True or False; got 1 \(int\)"),
        ({"env": ["A=1"]}, TypeError, r"env must be a dict of str -> str; got \['A=1'\] \(list\)"),
        ({"env": {"A": 1}}, TypeError, r"env must map str -> str; env\['A'\] = 1 \(int\)"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(kwargs, error, message):
    with pytest.raises(error, match=message):
        local_cluster(**kwargs)


def test_tf_config_in_env_is_checked_then_refused():
    with pytest.raises(
        ValueError,
        match=r"TF_CONFIG is not valid JSON: Expecting ',' delimiter at line 1 column 27 \(char 26\)",
    ):
        local_cluster(env={"TF_CONFIG": '{"cluster": {"worker": [] "task": {}}'})
    with pytest.raises(ValueError, match=r"TF_CONFIG\['task'\]\['index'\] must be an int in 0..0"):
        local_cluster(
            env={
                "TF_CONFIG": '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 1}}'
            }
        )
    with pytest.raises(
        ValueError, match=r"env\['TF_CONFIG'\] is set, but local_cluster writes TF_CONFIG"
    ):
        local_cluster(
            env={
                "TF_CONFIG": '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}'
            }
        )


@pytest.mark.parametrize("factory", [42, "MultiWorkerMirroredStrategy"])
def test_worker_strategy_refuses_a_factory_that_cannot_be_called(factory):
    with pytest.raises(TypeError) as info:
        worker_strategy(factory)
    assert str(info.value) == (
        f"factory must be None or a zero-argument callable that builds a tf.distribute "
        f"strategy; got {factory!r} ({type(factory).__name__}). Pass None for "
        f"tf.distribute.MultiWorkerMirroredStrategy, or a callable that takes no arguments "
        f"and returns a strategy, such as the class "
        f"compat_distribute.MultiWorkerMirroredStrategy (the class itself, not an instance "
        f"or its name)."
    )


def test_hooks_must_be_launch_hooks():
    with pytest.raises(
        TypeError,
        match=r"hooks must be None or a compat_distribute.testing.cluster.LaunchHooks; "
        r"got \{'pick_ports': None\} \(dict\)",
    ):
        local_cluster(2, hooks={"pick_ports": None})
    with pytest.raises(
        TypeError,
        match=r"LaunchHooks\(pick_ports=...\) must be None or a callable; got \[4000, 4001\] "
        r"\(list\)\. Pass a function",
    ):
        LaunchHooks(pick_ports=[4000, 4001])


def test_current_task_and_worker_strategy_refuse_outside_a_worker():
    with pytest.raises(RuntimeError, match="this process is not a local_cluster task"):
        current_task()
    with pytest.raises(RuntimeError, match="this process is not a local_cluster task"):
        worker_strategy()


# --------------------------------------------------------------------------
# parse_tf_config


def test_parse_tf_config_reads_a_full_config():
    text = json.dumps(
        {
            "cluster": {"chief": ["localhost:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]},
            "task": {"type": "worker", "index": 1},
            "rpc_layer": "grpc",
        }
    )
    config = parse_tf_config(text)
    assert config.cluster == {"chief": ("localhost:1",), "worker": ("127.0.0.1:2", "127.0.0.1:3")}
    assert (config.task_type, config.task_id, config.rpc_layer) == ("worker", 1, "grpc")
    assert parse_tf_config(config.to_json()) == config


def test_parse_tf_config_accepts_an_evaluator_outside_the_cluster():
    config = parse_tf_config(
        '{"cluster": {"worker": ["h:1"]}, "task": {"type": "evaluator", "index": 0}}'
    )
    assert (config.task_type, config.task_id) == ("evaluator", 0)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "{",
            r"TF_CONFIG is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2 \(char 1\)",
        ),
        ("[]", r"TF_CONFIG must be a JSON object; got \[\] \(list\)"),
        (
            '{"clusters": {}}',
            r"TF_CONFIG\['clusters'\] is not a TF_CONFIG key; the keys are cluster, task, rpc_layer",
        ),
        (
            '{"cluster": ["h:1"]}',
            r"TF_CONFIG\['cluster'\] must be an object mapping each job name to a list",
        ),
        (
            '{"cluster": {"worker": "h:1"}}',
            r"TF_CONFIG\['cluster'\]\['worker'\] must be a non-empty list of 'host:port' strings; got 'h:1'",
        ),
        (
            '{"cluster": {"worker": ["h:1", "h"]}}',
            r"TF_CONFIG\['cluster'\]\['worker'\]\[1\] must be a 'host:port' string with a port in 0..65535; got 'h' \(str\)",
        ),
        (
            '{"cluster": {"worker": ["h:99999"]}}',
            r"TF_CONFIG\['cluster'\]\['worker'\]\[0\] must be a 'host:port' string",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": "worker"}',
            r"TF_CONFIG\['task'\] must be an object",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"index": 0}}',
            r"TF_CONFIG\['task'\]\['type'\] is missing",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"type": "chief", "index": 0}}',
            r"TF_CONFIG\['task'\]\['type'\] must name a job of TF_CONFIG\['cluster'\] \(jobs: 'worker'\); got 'chief' \(str\)",
        ),
        (
            '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 2}}',
            r"TF_CONFIG\['task'\]\['index'\] must be an int in 0..1 \(job 'worker' has 2 task\(s\)\); got 2 \(int\)",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": "0"}}',
            r"TF_CONFIG\['task'\]\['index'\] must be an int in 0..0 .*got '0' \(str\)",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0, "id": 0}}',
            r"TF_CONFIG\['task'\]\['id'\] is not a task key",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "rpc_layer": 1}',
            r"TF_CONFIG\['rpc_layer'\] must be a string; got 1 \(int\)",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "rpc_layer": "http"}',
            r"TF_CONFIG\['rpc_layer'\] must be 'grpc', the RPC layer TensorFlow's servers speak; "
            r"got 'http'\. Write \"rpc_layer\": \"grpc\", or leave it out\.",
        ),
        (
            '{"cluster": {"chief": ["h:1", "h:2"], "worker": ["h:3"]}}',
            r"TF_CONFIG\['cluster'\]\['chief'\] must hold one address: a cluster has one chief at "
            r"most; got 2 \('h:1', 'h:2'\)\. Name the others' job 'worker'\.",
        ),
        (
            '{"cluster": {"chief": ["h:1"], "worker": ["h:2", "h:1"]}}',
            r"TF_CONFIG\['cluster'\]\['worker'\]\[1\] is 'h:1', the address of "
            r"TF_CONFIG\['cluster'\]\['chief'\]\[0\] too; each task needs an address of its own",
        ),
    ],
)
def test_parse_tf_config_names_the_wrong_key(text, message):
    with pytest.raises(ValueError, match=message):
        parse_tf_config(text)


def test_parse_tf_config_wants_text():
    with pytest.raises(TypeError, match=r"TF_CONFIG must be a JSON string; got \{\} \(dict\)"):
        parse_tf_config({})


# --------------------------------------------------------------------------
# Ports


def test_port_picker_never_hands_out_a_port_twice():
    picker = PortPicker()
    ports = [picker.pick() for _ in range(50)]
    assert len(set(ports)) == 50
    for port in ports[:5]:  # Free when handed out: binding works.
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_an_unknown_option_names_local_cluster_and_the_options_it_takes():
    options = (
        "has_chief, ps, evaluator, devices_per_worker, timeout, env, task_env, start_timeout, "
        "network, hooks, auto_restart, chief_ends_job, stream_output"
    )
    before = descendants()
    for given, guess in (({"timeuot": 3}, " (did you mean 'timeout'?)"), ({"bogus": 1}, "")):
        with pytest.raises(TypeError) as refused:
            local_cluster(2, **given)
        assert str(refused.value) == (
            f"local_cluster() got an unexpected keyword argument {next(iter(given))!r}{guess}. "
            f"It takes num_workers and {options}."
        )
    assert descendants() <= before
