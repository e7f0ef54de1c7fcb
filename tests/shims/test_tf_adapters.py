"""The adapters to TensorFlow's and pytest's internals: every entry exists in the
installed release, every private TensorFlow method the package overrides and every
name TensorFlow's borrowed methods read of the fake is a row, and nothing but the
adapters imports `tensorflow.python` or `_pytest`."""

import ast
import importlib
import inspect
import pathlib
import pkgutil
import textwrap

import pytest

import compat_distribute
from compat_distribute import _lazy
from compat_distribute.testing.pytest import _internals as pytest_internals

ADAPTERS = ("compat_distribute._tf", "compat_distribute.testing._tf")
PACKAGE = pathlib.Path(compat_distribute.__file__).parent
# Package files that may import each library's internals, and the prefixes that name them.
INTERNALS_RULES = (
    (("tensorflow.python", "tensorflow.core"), ("_tf.py", "testing/_tf.py")),
    (("_pytest",), ("testing/pytest/_internals.py",)),
)
THIRD_PARTY = ("tensorflow", "keras", "tf_keras")


def _entries(kind):
    for name in ADAPTERS:
        module = importlib.import_module(name)
        if kind == "internals":
            yield from ((name, key, target) for key, target in module.INTERNALS.items())
        else:
            yield from ((name, owner, member) for owner, member in getattr(module, kind))


@pytest.mark.parametrize("adapter, name, target", list(_entries("internals")))
def test_internal_exists(adapter, name, target):
    try:
        value = _lazy.load(target)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{adapter}.{name}: this TensorFlow has no {target} ({e}); update the adapter.")
    assert getattr(importlib.import_module(adapter), name) is value


@pytest.mark.parametrize("adapter, owner, member", list(_entries("PROTECTED")))
def test_protected_member_exists(adapter, owner, member):
    cls = _lazy.load(owner)
    if not hasattr(cls, member):
        assert hasattr(cls(), member), (
            f"{adapter}: this TensorFlow's {owner} has no {member}; update the adapter."
        )


@pytest.mark.parametrize("adapter, owner, method", list(_entries("OVERRIDES")))
def test_overridden_method_exists(adapter, owner, method):
    assert hasattr(_lazy.load(owner), method), (
        f"{adapter}.OVERRIDES: this TensorFlow's {owner} has no {method}, so the package's "
        f"override of it is never called; override what replaced it, and update the row."
    )


# Every class of the package, and what it overrides.


def _package_classes():
    """Every class with a class of the package in its MRO (made at import, or by fake_tpu())."""
    for module in pkgutil.walk_packages(compat_distribute.__path__, "compat_distribute."):
        importlib.import_module(module.name)
    from compat_distribute.testing import fake_tpu

    fake_tpu("v3-8")  # makes its TPUClusterResolver class; not started
    seen, stack = set(), [object]
    while stack:
        for sub in type.__subclasses__(stack.pop()):
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
    return [c for c in seen if any(_is_ours(k) for k in c.__mro__)]


def _module(cls):
    return cls.__module__ if isinstance(cls.__module__, str) else ""


def _is_ours(cls):
    return _module(cls).split(".")[0] == "compat_distribute"


def _is_third_party(cls):
    return _module(cls).split(".")[0] in THIRD_PARTY


def _is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_method(value):
    return callable(value) or isinstance(value, (property, staticmethod, classmethod))


def overrides(classes):
    """{(package class, name, TensorFlow class it overrides there)} of private methods."""
    found = set()
    for cls in classes:
        mro = cls.__mro__
        for i, ours in enumerate(mro):
            if not _is_ours(ours):
                continue
            for name, value in vars(ours).items():
                if not (_is_private(name) and _is_method(value)):
                    continue
                theirs = next(
                    (k for k in mro[i + 1 :] if _is_third_party(k) and name in vars(k)), None
                )
                if theirs is not None:
                    found.add((cls, name, theirs))
    return found


def _listed(rows, cls, name):
    return any(
        method == name and owner in cls.__mro__ and hasattr(owner, name)
        for owner, method in rows
    )


@pytest.fixture(name="classes", scope="module")
def classes_fixture():
    return _package_classes()


@pytest.fixture(name="override_rows", scope="module")
def override_rows_fixture():
    return [(_lazy.load(owner), method) for _, owner, method in _entries("OVERRIDES")]


def test_every_private_method_the_package_overrides_is_a_row(classes, override_rows):
    found = overrides(classes)
    assert len(found) >= 25  # the walk reached the fake TPU's classes
    missing = sorted(
        f"{cls.__qualname__}.{name} over {theirs.__module__}:{theirs.__qualname__}"
        for cls, name, theirs in found
        if not _listed(override_rows, cls, name)
    )
    assert not missing, (
        "These override a private TensorFlow method but are no row of OVERRIDES in "
        f"compat_distribute._tf or compat_distribute.testing._tf: {missing}"
    )


def test_every_override_row_is_overridden_somewhere(classes, override_rows):
    found = overrides(classes)
    unused = [
        f"{owner.__qualname__}.{method}"
        for owner, method in override_rows
        if not any(name == method and owner in cls.__mro__ for cls, name, _ in found)
    ]
    assert not unused, f"OVERRIDES rows that no class of the package overrides: {unused}"


# What TensorFlow's borrowed methods read of the fake.


def _tf_version():
    import tensorflow as tf

    return tuple(int(part) for part in tf.__version__.split(".")[:2])


def _applies(versions, installed):
    """Whether a row's versions ("", "<2.16", ">=2.16") include `installed` (major, minor)."""
    if not versions:
        return True
    op, bound = (versions[:2], versions[2:]) if versions[1] == "=" else (versions[:1], versions[1:])
    bound = tuple(int(part) for part in bound.split("."))
    return {"<": installed < bound, ">=": installed >= bound}[op]


def _function(value):
    if isinstance(value, property):
        value = value.fget
    return inspect.unwrap(value) if inspect.isfunction(value) else None


def reads_of_self(function):
    """The attributes `function`'s source reads on `self` ("x") and `self.extended` ("extended.x")."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            found.add(node.attr)
        elif (
            isinstance(node.value, ast.Attribute)
            and node.value.attr == "extended"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "self"
        ):
            found.add(f"extended.{node.attr}")
    return found


def _method_path(function):
    return f"{function.__module__}:{function.__qualname__}"


def borrowed(classes):
    """{(package class, TensorFlow function assigned on a class of the package)}."""
    found = set()
    for cls in classes:
        for ours in filter(_is_ours, cls.__mro__):
            for value in vars(ours).values():
                function = _function(value)
                if function is not None and function.__module__.split(".")[0] in THIRD_PARTY:
                    found.add((cls, function))
    return found


@pytest.fixture(name="fake_and_plain", scope="module")
def fake_and_plain_fixture():
    """A fake TPU strategy and a MirroredStrategy over the same devices."""
    import tensorflow as tf

    from compat_distribute.testing import FakeTPUClusterResolver, FakeTPUStrategy

    fake = FakeTPUStrategy(FakeTPUClusterResolver("v3-8"))
    return fake, tf.distribute.MirroredStrategy(list(fake.extended.worker_devices))


def _sets_or_defines(fake, plain, tf_class):
    """Names `fake` sets or defines itself, and which of them are methods borrowed
    from `tf_class` (TensorFlow's own code then calls its own)."""
    own, borrowed_here = set(vars(fake)) - set(vars(plain)), set()
    for ours in filter(_is_ours, type(fake).__mro__):
        for name, value in vars(ours).items():
            function = _function(value)
            if function is not None and function.__qualname__.split(".")[0] == tf_class:
                borrowed_here.add(name)
            else:
                own.add(name)
    return own - borrowed_here, borrowed_here


def _callbacks():
    return importlib.import_module("compat_distribute.testing._tf").CALLBACKS


def test_every_name_a_borrowed_method_reads_of_the_fake_is_a_callback(classes, fake_and_plain):
    fake, plain = fake_and_plain
    rows = {(method, attribute) for method, attribute, _ in _callbacks()}
    checked, unlisted, unknown = 0, set(), set()
    for cls, function in borrowed(classes):
        on_strategy = type(fake) is cls
        if not (on_strategy or type(fake.extended) is cls):
            continue
        for read in reads_of_self(function):
            prefix, _, name = read.rpartition(".")
            if not _is_private(name):
                continue
            checked += 1
            pair = (fake, plain) if on_strategy and not prefix else (fake.extended, plain.extended)
            own, borrowed_here = _sets_or_defines(*pair, function.__qualname__.split(".")[0])
            if name in own and (_method_path(function), read) not in rows:
                unlisted.add(f"{_method_path(function)} reads {read}")
            elif name not in own | borrowed_here and not hasattr(pair[1], name):
                unknown.add(f"{_method_path(function)} reads {read}")
    assert checked >= 15  # the borrowed methods were found and read
    assert not unlisted, f"rows missing from compat_distribute.testing._tf.CALLBACKS: {sorted(unlisted)}"
    assert not unknown, (
        f"borrowed TensorFlow methods read names that neither TensorFlow's MirroredStrategy "
        f"nor the fake provides: {sorted(unknown)}"
    )


@pytest.mark.parametrize("method, attribute, versions", _callbacks())
def test_callback_is_still_read(method, attribute, versions):
    read = attribute in reads_of_self(_function(_lazy.load(method)))
    if _applies(versions, _tf_version()):
        assert read, (
            f"compat_distribute.testing._tf.CALLBACKS: this TensorFlow's {method} no longer "
            f"reads {attribute}, so the fake's is ignored; find what it reads instead."
        )
    else:  # the row is for other releases; on this one nothing reads it there
        assert not read, f"{method} reads {attribute} on this TensorFlow too: widen its versions"


def test_callback_versions_are_parsed():
    assert _applies("", (2, 21)) and _applies("<2.16", (2, 15)) and _applies(">=2.16", (2, 23))
    assert not _applies("<2.16", (2, 16)) and not _applies(">=2.16", (2, 15))


# pytest's internals.


@pytest.mark.parametrize("name", sorted(pytest_internals.INTERNALS))
def test_pytest_internal_exists(name):
    targets = pytest_internals.INTERNALS[name]
    found = [t for t in targets if _has(t)]
    assert found, f"this pytest has none of {targets}; update compat_distribute.testing.pytest._internals."


def _has(target):
    module, _, attribute = target.partition(":")
    return hasattr(importlib.import_module(module), attribute)


def test_the_pytest_command_entry_is_found():
    assert len(pytest_internals.command_entry_codes()) >= 1


# Only the adapters import internals.


def internal_imports(path, prefixes):
    """(line, name) of each import of a module under `prefixes`, or string naming one, in `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        found += [(node.lineno, n) for n in names if n.startswith(prefixes)]
    return found


@pytest.mark.parametrize("prefixes, allowed", INTERNALS_RULES, ids=["tensorflow", "pytest"])
def test_only_the_adapters_import_internals(prefixes, allowed):
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line} {name}"
        for path in files
        if str(path.relative_to(PACKAGE)) not in allowed
        for line, name in internal_imports(path, prefixes)
    ]
    assert not offenders, f"only {allowed} may name {prefixes}: {offenders}"


def test_the_import_rule_sees_every_spelling(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import tensorflow.python.distribute\n"
        "from tensorflow.python import framework\n"
        "import importlib\n"
        "importlib.import_module('tensorflow.python.eager.context')\n"
        "from tensorflow import distribute\n"
        "from _pytest import config\n"
    )
    assert internal_imports(source, ("tensorflow.python",)) == [
        (1, "tensorflow.python.distribute"),
        (2, "tensorflow.python"),
        (4, "tensorflow.python.eager.context"),
    ]
    assert internal_imports(source, ("_pytest",)) == [(6, "_pytest")]


def test_adapter_imports_no_tensorflow_until_used(run_python):
    result = run_python(
        """
        import sys
        import compat_distribute._tf, compat_distribute.testing._tf
        print(sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"))
        """,
        fresh=True,  # It asserts what a fresh interpreter has imported.
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_mirrored_extended_keeps_its_input_workers_as_host_device_pairs():
    # Fake TPU pods set this attribute (testing._tf.set_input_workers).
    import tensorflow as tf

    extended = tf.distribute.MirroredStrategy(["/cpu:0"]).extended
    (host, devices), = extended._input_workers_devices  # pylint: disable=protected-access
    cpu = "/job:localhost/replica:0/task:0/device:CPU:0"
    assert (host, devices) == (cpu, (cpu,))


def test_a_collectives_call_time_key_names_its_strategys_key_allocator():
    # multi_step_fix(strategy) tells a strategy's collectives by these members
    # (compat_distribute._tf.capture_collective_keys / collective_keys).
    import tensorflow as tf

    from compat_distribute import _patching, _tf
    from keras_helpers import two_cpu_mirrored

    strategy = two_cpu_mirrored()
    captured = []
    original = _tf.FuncGraph.capture_call_time_value

    def record(graph, closure, *args, **kwargs):
        captured.append(closure)
        return original(graph, closure, *args, **kwargs)

    @tf.function
    def step():
        return strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))
        )

    with _patching.Patch([(_tf.FuncGraph, "capture_call_time_value", record)]):
        results = strategy.experimental_local_results(step())
    assert [float(r) for r in results] == [2.0, 2.0]
    keys = {id(_tf.capture_collective_keys(closure)) for closure in captured}
    assert keys == {id(_tf.collective_keys(strategy.extended))}
    assert _tf.capture_collective_keys(lambda: 1) is None
