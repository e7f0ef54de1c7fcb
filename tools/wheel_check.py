"""The wheel as users get it: build it, install it into a fresh venv, use it from outside the tree.

    python tools/wheel_check.py --tf-venv .venv [--keep DIR]

1. Builds the wheel from this tree (`pip wheel --no-deps --no-build-isolation`,
   so no network is needed) and checks what it ships (py.typed, entry points).
2. Makes a fresh venv and installs the wheel into it with pip, dependencies
   resolved as usual. The shortcut: TensorFlow is not downloaded again (about
   1.5 GB, minutes). A `.pth` file puts a folder of links to the TF venv's
   installed distributions on the new venv's path, the package's own install
   left out, so pip finds `tensorflow` and `absl-py` already satisfied and the
   package itself comes from the wheel alone.
3. From a directory outside the tree, with no PYTHONPATH: `compat-distribute
   --version` (the wheel's metadata), `compat-distribute smoke --json`, and a
   small user project: a module of TF1-style code through
   `compat_distribute.TPUStrategy`, and a test file that uses the plugin's
   fixtures, markers and options as README.md documents. The user's pytest
   session must end within EXIT_BOUND_S of its report, with no helper of ours.

Prints one line per step with its time; exits 1 naming the first step that failed.
"""

import argparse
import configparser
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAME = "compat_distribute"
# A user's pytest session ends this soon after its last line of report, or the check fails.
EXIT_BOUND_S = 10.0
STEP_TIMEOUT_S = 600

LEGACY_MODULE = '''\
"""TF1-era distribution code, unchanged but for the import: the user's module."""
import tensorflow as tf

import compat_distribute


def build_strategy(resolver):
    return compat_distribute.TPUStrategy(resolver, steps_per_run=4)  # TF1's signature


def replica_sum(strategy):
    """Each replica returns 1 + its index; TF1's reduce, without `axis`, sums them."""

    @tf.function
    def step():
        ctx = tf.distribute.get_replica_context()
        return tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0

    per_replica = strategy.experimental_run_v2(step)  # TF 2.0-2.1's name: warns, runs `run`
    return float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica))


def train_counter(strategy):
    """steps_per_run steps of a counter in one call, through a TF1 iterator."""
    with strategy.scope():
        counter = tf.Variable(0.0, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    dataset = tf.data.Dataset.from_tensors(1.0).repeat().batch(strategy.num_replicas_in_sync)
    iterator = strategy.make_dataset_iterator(dataset)
    iterator.initialize()

    def step_fn(ctx, inputs):
        del ctx, inputs
        counter.assign_add(1.0)

    strategy.extended.experimental_run_steps_on_iterator(
        step_fn, iterator, iterations=strategy.steps_per_run)
    return float(counter.numpy())
'''

USER_TESTS = '''\
"""The user's tests: the plugin's fixtures, markers and options, as README.md shows them."""
import pytest
import tensorflow as tf

import legacy_model


def test_sum(strategy):  # runs 3 times: default, mirrored, tpu (the fake v3-8)
    @tf.function
    def step():
        return strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)

    assert step() == strategy.num_replicas_in_sync


@pytest.mark.multi_device(8)  # skipped under [default]: 1 replica
def test_eight_replicas(strategy):
    assert strategy.num_replicas_in_sync == 8


def test_legacy_code_on_the_fake_tpu(tpu_resolver):
    strategy = legacy_model.build_strategy(tpu_resolver)
    assert strategy.num_replicas_in_sync == 8
    assert legacy_model.replica_sum(strategy) == sum(range(1, 9))
    assert legacy_model.train_counter(strategy) == 4.0


@pytest.mark.tpu  # skipped unless the TPU is real
def test_on_hardware(tpu_strategy):
    assert tpu_strategy.num_replicas_in_sync >= 8
'''

# The user's ini file: the plugin's settings as README.md lists them.
USER_INI = '''\
[pytest]
tf_devices = 8
fake_tpu_topology = v3-8
'''

EXPECTED_OUTCOME = "6 passed, 2 skipped"  # test_sum x3, test_eight_replicas x2 (+1 skip), legacy, tpu (skip)


class CheckFailed(Exception):
    pass


def say(step, seconds, text):
    print(f"wheel_check: {step:<24} {seconds:7.1f} s  {text}", flush=True)


def run(argv, *, cwd, env, timeout=STEP_TIMEOUT_S):
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise CheckFailed(f"{' '.join(map(str, argv))} exited {result.returncode}:\n"
                          f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def user_env():
    """The environment a user's shell has: ours, without anything that points into the tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def setup_cfg_version():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config["metadata"]["version"]


def declared_entry_points():
    """The entry point lines setup.cfg declares ("name = module:attr")."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return [line.strip() for group in config["options.entry_points"].values()
            for line in group.splitlines() if line.strip()]


def build_wheel(python, work):
    dist = work / "dist"
    run([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", dist, ROOT], cwd=work, env=user_env())
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # setuptools' scratch space in the tree
    wheels = list(dist.glob(f"{NAME}-*.whl"))
    if len(wheels) != 1:
        raise CheckFailed(f"expected one wheel in {dist}, found {wheels}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        entry_points = next(wheel.read(n).decode() for n in names
                            if n.endswith(".dist-info/entry_points.txt"))
    missing = [n for n in (f"{NAME}/py.typed", f"{NAME}/smoke/cli.py",
                           f"{NAME}/testing/pytest/hooks.py", f"{NAME}/__main__.py")
               if n not in names]
    if missing:
        raise CheckFailed(f"the wheel lacks {missing}")
    for line in declared_entry_points():
        if line not in entry_points:
            raise CheckFailed(f"the wheel's entry_points.txt lacks {line!r}:\n{entry_points}")
    return wheels[0], f"{wheels[0].name}, {len(names)} files"


def site_packages(venv):
    return next((pathlib.Path(venv) / "lib").glob("python3*/site-packages"))


def make_venv(tf_venv, work):
    """A fresh venv that sees the TF venv's distributions, the package's own left out."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    deps = work / "installed-deps"
    deps.mkdir()
    skipped = re.compile(rf"^({NAME}|__editable__|_distutils_hack|distutils-precedence"
                         rf"|pip|setuptools|pkg_resources|__pycache__)", re.IGNORECASE)
    linked = 0
    for entry in site_packages(tf_venv).iterdir():
        if not skipped.match(entry.name) and not entry.name.endswith(".pth"):
            (deps / entry.name).symlink_to(entry)
            linked += 1
    (site_packages(venv) / "installed-deps.pth").write_text(f"{deps}\n")
    return venv, f"{linked} installed distributions linked from {tf_venv}"


def install_wheel(venv, wheel, work):
    result = run([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel],
                 cwd=work, env=user_env())
    where = run([venv / "bin" / "python", "-c",
                 f"import {NAME}, os; print(os.path.dirname({NAME}.__file__))"],
                cwd=work, env=user_env()).stdout.strip()
    if pathlib.Path(where).resolve() != (site_packages(venv) / NAME).resolve():
        raise CheckFailed(f"{NAME} imports from {where}, not from the fresh venv")
    if not (pathlib.Path(where) / "py.typed").is_file():
        raise CheckFailed("py.typed is not installed")
    return f"imports from {where}" + (f"; pip said: {result.stdout.strip()}" if result.stdout.strip() else "")


def check_version(venv, user):
    out = run([venv / "bin" / "compat-distribute", "--version"], cwd=user, env=user_env()).stdout
    wanted = f"compat-distribute {setup_cfg_version()}"
    if out.strip() != wanted:
        raise CheckFailed(f"--version printed {out.strip()!r}, expected {wanted!r}")
    return out.strip()


def check_smoke(venv, user):
    out = run([venv / "bin" / "compat-distribute", "smoke", "--json"], cwd=user,
              env=user_env()).stdout
    report = json.loads(out)
    passed = sum(c["ok"] for c in report["checks"])
    if not report["ok"] or report["replicas"] != 8:
        raise CheckFailed(f"smoke --json reported {out}")
    return f"ok, {report['device']}, {report['replicas']} replicas, {passed}/{len(report['checks'])} checks"


def write_user_project(user):
    (user / "legacy_model.py").write_text(LEGACY_MODULE)
    (user / "test_user.py").write_text(USER_TESTS)
    (user / "pytest.ini").write_text(USER_INI)


def run_user_session(venv, user, extra_args=(), env=None):
    """Runs pytest in the user's project; returns (summary line, seconds from it to exit)."""
    argv = [venv / "bin" / "python", "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *extra_args]
    proc = subprocess.Popen(argv, cwd=user, env=env or user_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines, summary, summary_at = [], None, None
    deadline = time.monotonic() + STEP_TIMEOUT_S
    try:
        for line in proc.stdout:
            lines.append(line)
            if re.search(r"\b(passed|failed|error|skipped)\b.* in [\d.]+s", line):
                summary, summary_at = line.strip().strip("= "), time.monotonic()
            if time.monotonic() > deadline:
                break
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise CheckFailed(f"pytest still ran {STEP_TIMEOUT_S} s after it started "
                              f"(report: {summary!r}):\n{''.join(lines)[-4000:]}")
    lag = time.monotonic() - summary_at if summary_at else float("nan")
    if proc.returncode != 0 or summary is None:
        raise CheckFailed(f"pytest exited {proc.returncode}:\n{''.join(lines)[-4000:]}")
    return summary, lag, "".join(lines)


def check_user_session(venv, user, exit_bound):
    summary, lag, output = run_user_session(venv, user)
    if not summary.startswith(EXPECTED_OUTCOME):
        raise CheckFailed(f"expected {EXPECTED_OUTCOME!r}, got {summary!r}:\n{output[-4000:]}")
    text = f"{summary}; exit {lag:.1f} s after the report (bound {exit_bound:g} s)"
    if not lag <= exit_bound:
        raise CheckFailed(f"the session ended {lag:.1f} s after its report: {text}")
    return text


def check_plugin_by_name(venv, work):
    """With entry points off, `-p compat_distribute` (the entry point's name) loads the plugin.

    Run in a project of no settings, so the plugin has no devices to make.
    """
    bare = work / "bare-project"
    bare.mkdir(exist_ok=True)
    (bare / "pytest.ini").write_text("[pytest]\n")
    env = dict(user_env(), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    out = run([venv / "bin" / "python", "-m", "pytest", "-p", "compat_distribute",
               "-p", "no:cacheprovider", "--markers"], cwd=bare, env=env).stdout
    if "multi_device" not in out:
        raise CheckFailed(f"-p compat_distribute did not register the markers:\n{out[-2000:]}")
    return "-p compat_distribute registers the plugin with autoload off"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tf-venv", required=True, type=pathlib.Path,
                        help="a venv with TensorFlow installed (the project's .venv)")
    parser.add_argument("--keep", type=pathlib.Path, help="work here and leave it (else a temp dir)")
    parser.add_argument("--exit-bound", type=float, default=EXIT_BOUND_S, metavar="SECONDS",
                        help=f"the most the user's pytest may take to exit after its report "
                        f"(default {EXIT_BOUND_S:g})")
    args = parser.parse_args(argv)
    work = args.keep or pathlib.Path(tempfile.mkdtemp(prefix="wheel_check."))
    work.mkdir(parents=True, exist_ok=True)
    user = work / "user-project"
    user.mkdir()
    write_user_project(user)
    python = args.tf_venv.resolve() / "bin" / "python"
    state = {}
    steps = [
        ("build wheel", lambda: state.setdefault("wheel", build_wheel(python, work))[1]),
        ("fresh venv", lambda: state.setdefault("venv", make_venv(args.tf_venv.resolve(), work))[1]),
        ("pip install wheel", lambda: install_wheel(state["venv"][0], state["wheel"][0], work)),
        ("--version", lambda: check_version(state["venv"][0], user)),
        ("smoke --json", lambda: check_smoke(state["venv"][0], user)),
        ("user's pytest session", lambda: check_user_session(state["venv"][0], user, args.exit_bound)),
        ("-p compat_distribute", lambda: check_plugin_by_name(state["venv"][0], work)),
    ]
    total = time.monotonic()
    try:
        for name, step in steps:
            start = time.monotonic()
            try:
                text = step()
            except (CheckFailed, subprocess.TimeoutExpired) as e:
                say(name, time.monotonic() - start, "FAILED")
                print(f"wheel_check: FAILED {name}: {e}", file=sys.stderr)
                return 1
            say(name, time.monotonic() - start, text)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    say("all", time.monotonic() - total, "passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
