"""check_tpu_compatible on real TensorFlow: what a TPU would refuse, found on the CPU."""

import os
import warnings

import pytest
import tensorflow as tf

import compat_distribute
from compat_distribute.testing import FakeTPUClusterResolver, xla_check
from compat_distribute.testing.xla_check import (
    TPUCompatibilityError,
    TPUPerformanceWarning,
    check_graph,
    check_tpu_compatible,
    ensure_tpu_compatible,
)

THIS_FILE = os.path.realpath(__file__)


def line_of(marker):
    """The line number of the one line in this file ending with `# <marker>`."""
    with open(THIS_FILE) as f:
        hits = [n for n, text in enumerate(f, 1) if text.rstrip().endswith(f"# <{marker}>")]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def only(entries, kind=None):
    entries = [e for e in entries if kind is None or e.kind == kind]
    assert len(entries) == 1, "\n".join(map(str, entries))
    return entries[0]


def assert_at(entry, marker):
    assert os.path.realpath(entry.filename) == THIS_FILE, entry
    assert entry.lineno == line_of(marker), entry
    assert entry.source == f"{entry.filename}:{line_of(marker)}"


X = tf.constant([1.0, -2.0, 3.0, -4.0])


@pytest.fixture(scope="module")
def one_cpu_strategy():
    return tf.distribute.MirroredStrategy(["/cpu:0"])


@pytest.fixture(scope="module")
def all_cpu_strategy():
    """One replica per logical CPU: 1, or 8 under a virtual-device session."""
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(cpus)


# ------------------------------------------------------------ steps


def string_step(x):
    label = tf.strings.as_string(x)  # <as_string>
    return tf.reduce_sum(x), label


def py_function_step(x):
    y = tf.py_function(lambda a: a * 2.0, [x], tf.float32)  # <py_function>
    return tf.reduce_sum(y)


def numpy_function_step(x):
    y = tf.numpy_function(lambda a: a * 2.0, [x], tf.float32)  # <numpy_function>
    return tf.reduce_sum(y)


def float64_step(x):
    wide = tf.cast(x, tf.float64)  # <float64>
    return tf.reduce_sum(wide * wide)


def two_problem_step(x):
    label = tf.strings.as_string(x)  # <two:as_string>
    total = tf.reduce_sum(tf.cast(x, tf.float64))  # <two:float64>
    return total, label


def data_shape_step(x):
    positive = tf.boolean_mask(x, x > 0)  # <boolean_mask>
    values, _ = tf.unique(tf.cast(x, tf.int32))  # <unique>
    return tf.reduce_sum(positive), tf.size(values)


def nested_step(x):
    def body(i, acc):
        return i + 1, acc + tf.strings.length(tf.strings.as_string(acc))  # <in_while>

    if tf.reduce_sum(x) > 0:
        y = tf.reduce_sum(tf.cast(x, tf.complex128))  # <in_cond>
    else:
        y = tf.zeros([], tf.complex128)  # <in_else>
    _, acc = tf.while_loop(lambda i, acc: i < 3, body, [tf.constant(0), tf.constant(0)])
    return y, acc


def python_str_step(x):  # <python_str>
    total = tf.reduce_sum(x)
    return total, "done"


def string_constant_return_step(x):
    return tf.reduce_sum(x), tf.constant("done")  # <returned_string_constant>


def dynamic_fill_step(x):
    return tf.zeros(tf.cast(tf.reduce_sum(tf.abs(x)), tf.int32))  # <fill>


# ------------------------------------------------------------ problems


def test_string_op_is_a_problem_at_its_line():
    report = check_tpu_compatible(string_step, X)
    assert not report.ok
    problem = only(report.problems)
    assert (problem.kind, problem.op_type) == ("unsupported_op", "AsString")
    assert_at(problem, "as_string")
    assert "XLA has no kernel for AsString" in problem.reason
    # TF's own compile error for the op.
    assert "No registered 'AsString' OpKernel for XLA_CPU_JIT devices" in problem.tf_message
    assert report.compiled is False
    assert report.warnings == ()


def test_py_function_is_a_problem_at_its_line():
    report = check_tpu_compatible(py_function_step, X)
    problem = only(report.problems)
    assert (problem.kind, problem.op_type) == ("unsupported_op", "EagerPyFunc")
    assert_at(problem, "py_function")
    assert "Python callback" in problem.reason
    assert "No registered 'EagerPyFunc' OpKernel for XLA_CPU_JIT devices" in problem.tf_message


def test_numpy_function_is_a_problem_at_its_line():
    problem = only(check_tpu_compatible(numpy_function_step, X).problems)
    assert problem.op_type in ("PyFunc", "PyFuncStateless"), problem
    assert_at(problem, "numpy_function")
    assert "Python callback" in problem.reason


def test_float64_is_a_problem_at_its_line_and_compiles_on_cpu():
    report = check_tpu_compatible(float64_step, X)
    # The CPU compiles float64; only the TPU dtype check catches it, once, at
    # the cast that introduces it (not at the ops that carry it on).
    assert report.compiled is True
    problem = only(report.problems)
    assert (problem.kind, problem.op_type) == ("unsupported_dtype", "Cast")
    assert_at(problem, "float64")
    assert problem.reason.startswith("produces float64")


def test_two_problems_are_both_reported():
    report = check_tpu_compatible(two_problem_step, X)
    assert len(report.problems) == 2, str(report)
    assert_at(only(report.problems, "unsupported_op"), "two:as_string")
    assert_at(only(report.problems, "unsupported_dtype"), "two:float64")


def test_problems_inside_cond_and_while_bodies_are_found():
    report = check_tpu_compatible(nested_step, X)
    assert {(p.op_type, p.lineno) for p in report.problems} == {
        ("AsString", line_of("in_while")),
        ("Cast", line_of("in_cond")),
        ("Const", line_of("in_else")),
    }, str(report)
    by_line = {p.lineno: p for p in report.problems}
    assert by_line[line_of("in_while")].op_type == "AsString"
    assert by_line[line_of("in_while")].function.startswith("while_body")
    assert by_line[line_of("in_cond")].reason.startswith("produces complex128")
    assert by_line[line_of("in_cond")].function.startswith("cond_true")


def test_shape_that_must_be_static_is_found_by_the_real_compile():
    report = check_tpu_compatible(dynamic_fill_step, X)
    problem = only(report.problems)
    assert (problem.kind, problem.op_type) == ("xla_compile", "Fill")
    assert_at(problem, "fill")
    assert "must be a compile-time constant" in problem.tf_message


# ------------------------------------------------------------ warnings


def test_data_dependent_shapes_compile_with_warnings():
    report = check_tpu_compatible(data_shape_step, X)
    assert report.ok and report.compiled is True, str(report)
    assert [w.op_type for w in report.warnings] == ["Where", "Unique"]
    assert_at(report.warnings[0], "boolean_mask")
    assert_at(report.warnings[1], "unique")
    assert all(w.kind == "data_dependent_shape" for w in report.warnings)


def test_tf_print_is_a_host_round_trip_warning():
    def print_step(x):
        tf.print(x)
        return x * 2.0

    report = check_tpu_compatible(print_step, X)
    assert report.ok
    assert {w.op_type for w in report.warnings} == {"PrintV2", "StringFormat"}
    assert {w.kind for w in report.warnings} == {"host_round_trip"}


# ------------------------------------------------------------ clean steps


def test_clean_training_step_with_all_reduce_is_compatible(one_cpu_strategy):
    with one_cpu_strategy.scope():
        w = tf.Variable([0.5, 0.5, 0.5, 0.5])

    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((w * x) ** 2)
        grad = tape.gradient(loss, w)
        grad = tf.distribute.get_replica_context().all_reduce("sum", grad)
        w.assign_sub(0.1 * grad)
        return loss

    report = check_tpu_compatible(train_step, X, strategy=one_cpu_strategy)
    assert report.ok and report.problems == () and report.warnings == ()
    assert report.compiled is True
    assert str(report) == "train_step: TPU compatible"
    # Checked, never run.
    assert w.numpy().tolist() == [0.5, 0.5, 0.5, 0.5]


def test_keras_sgd_step_is_compatible(one_cpu_strategy):
    import keras  # pylint: disable=g-import-not-at-top

    with one_cpu_strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    before = [v.numpy().copy() for v in model.trainable_variables]

    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        grads = tf.distribute.get_replica_context().all_reduce("sum", grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    report = check_tpu_compatible(train_step, tf.ones([3, 4]), strategy=one_cpu_strategy)
    assert report.ok and report.warnings == (), str(report)
    after = [v.numpy() for v in model.trainable_variables]
    assert all((a == b).all() for a, b in zip(before, after))


def test_every_logical_cpu_as_a_replica(all_cpu_strategy):
    n = all_cpu_strategy.num_replicas_in_sync

    def reduce_step(x):
        return tf.distribute.get_replica_context().all_reduce("sum", x * 2.0)

    clean = check_tpu_compatible(reduce_step, X, strategy=all_cpu_strategy)
    assert clean.ok, str(clean)
    # Several replicas span devices: the walk decides, ops compile alone.
    assert clean.compiled is (True if n == 1 else None)
    bad = check_tpu_compatible(string_step, X, strategy=all_cpu_strategy)
    problem = only(bad.problems)  # one entry, however many replicas
    assert_at(problem, "as_string")
    assert "No registered 'AsString' OpKernel" in problem.tf_message


def test_strategy_in_scope_is_used_by_default(one_cpu_strategy):
    seen = []

    def step(x):
        seen.append(type(tf.distribute.get_replica_context()).__name__)
        return x + 1.0

    with one_cpu_strategy.scope():
        assert check_tpu_compatible(step, X).ok
    assert "_MirroredReplicaContext" in seen


# ------------------------------------------------------------ strict mode


def test_error_lists_every_problem_with_tf_message():
    with pytest.raises(TPUCompatibilityError) as info:
        ensure_tpu_compatible(two_problem_step, (X,))
    text = str(info.value)
    # A TPU's compile failure is an InvalidArgumentError naming the op; so is this.
    assert isinstance(info.value, tf.errors.InvalidArgumentError)
    assert text.startswith(
        "Detected unsupported operations when trying to compile graph two_problem_step "
        "on XLA_TPU_JIT: AsString, Cast\n"
    )
    assert "two_problem_step: 2 TPU problem(s)" in text
    assert f"{THIS_FILE}:{line_of('two:as_string')}: AsString" in text
    assert f"{THIS_FILE}:{line_of('two:float64')}: Cast" in text
    assert "No registered 'AsString' OpKernel for XLA_CPU_JIT" in text
    assert len(info.value.report.problems) == 2


def test_ensure_warns_for_hazards_and_returns_report():
    with pytest.warns(TPUPerformanceWarning, match="boolean_mask/Where"):
        report = ensure_tpu_compatible(data_shape_step, (X,))
    assert report.ok


def test_ensure_is_silent_for_a_clean_step():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = ensure_tpu_compatible(lambda x, scale: x * scale, (X,), {"scale": 2.0})
    assert report.ok and not report.warnings


def test_check_graph_on_the_function_strategy_run_traced(one_cpu_strategy):
    traced = tf.function(lambda x: one_cpu_strategy.run(two_problem_step, args=(x,)))
    concrete = traced.get_concrete_function(tf.TensorSpec([4], tf.float32))
    for target in (concrete, concrete.graph):
        report = check_graph(target)
        assert {(p.op_type, p.lineno) for p in report.problems} == {
            ("AsString", line_of("two:as_string")),
            ("Cast", line_of("two:float64")),
        }
        assert report.compiled is None
    with pytest.raises(TPUCompatibilityError, match="2 TPU problem"):
        xla_check.ensure_graph_compatible(concrete)


# ------------------------------------------------------------ bad input


def test_bad_arguments_are_refused_with_what_to_do():
    with pytest.raises(
        TypeError,
        match=r"check_tpu_compatible\(fn=\.\.\.\) "
        r"takes the replica step function; received 3 of type "
        r"int",
    ):
        check_tpu_compatible(3)
    with pytest.raises(
        TypeError,
        match=r"check_tpu_compatible\(strategy=\.\.\.\)"
        r" takes a tf.distribute.Strategy; received 'tpu'",
    ):
        check_tpu_compatible(string_step, X, strategy="tpu")
    with pytest.raises(
        TypeError,
        match=r"check_graph\(graph_or_function=\.\.\.\)" r".*received <function string_step",
    ):
        check_graph(string_step)


def test_ensure_names_itself_and_its_arguments_when_refusing_them():
    with pytest.raises(TypeError) as info:
        ensure_tpu_compatible(42)
    assert str(info.value) == (
        "ensure_tpu_compatible(fn=...) takes the replica step function; received 42 of type "
        "int. Pass the function you would give to strategy.run, e.g. "
        "ensure_tpu_compatible(step, ...)."
    )
    with pytest.raises(
        TypeError, match=r"^ensure_tpu_compatible\(strategy=\.\.\.\) takes a tf.distribute.Strategy"
    ):
        ensure_tpu_compatible(string_step, (X,), strategy="tpu")
    with pytest.raises(TypeError) as info:
        ensure_tpu_compatible(string_step, X)
    assert str(info.value).startswith(
        "ensure_tpu_compatible(args=...) takes the step's positional arguments as a tuple or "
        "list; received <tf.Tensor"
    )
    assert str(info.value).endswith("of type EagerTensor. Pass args=(x,) for one argument.")
    with pytest.raises(TypeError, match=r"^ensure_tpu_compatible\(kwargs=\.\.\.\) takes .* dict or None"):
        ensure_tpu_compatible(string_step, (X,), kwargs=[("x", X)])


RETURNED_STRING = (
    "the step returns a string tensor (a Python str the step returns becomes one), and a TPU "
    "step can return only numbers and bools; return numbers (or nothing) from the step, and "
    "make the text after strategy.run returns"
)


def test_a_returned_python_str_is_reported_at_the_step_with_what_to_do(all_cpu_strategy):
    for strategy in (None, all_cpu_strategy):
        report = check_tpu_compatible(python_str_step, X, strategy=strategy)
        problem = only(report.problems)  # one entry, however many replicas
        assert_at(problem, "python_str")  # the step's def: the str became a tensor after it returned
        assert (problem.rule, problem.kind, problem.op_type) == (
            "returns_string",
            "unsupported_dtype",
            "_Retval",
        )
        assert problem.reason == RETURNED_STRING
        assert "make shapes static" not in str(report) and ": ? (" not in str(report)
    with pytest.raises(TPUCompatibilityError, match="the step returns a string tensor"):
        ensure_tpu_compatible(python_str_step, (X,))
    # A string tensor made in the step is reported at its own line.
    problem = only(check_tpu_compatible(string_constant_return_step, X).problems)
    assert_at(problem, "returned_string_constant")
    assert problem.reason == RETURNED_STRING
    # A returned string an op already reported is not reported twice.
    assert [p.op_type for p in check_tpu_compatible(string_step, X).problems] == ["AsString"]


def test_packed_variables_on_one_core_compile_as_the_copies_handles():
    # TPUStrategyV2 packs variables (one handle for every replica) even on one
    # core. XLA on the CPU cannot compile a captured packed handle, so while the
    # check traces, the fake's variables use their copies' handles and the
    # whole step still compiles.
    one_core = compat_distribute.TPUStrategy(FakeTPUClusterResolver(mesh_shape=(1, 1, 1, 1)))
    with one_core.scope():
        v = tf.Variable(2.0)
    assert v._packed_variable is not None  # pylint: disable=protected-access

    def step(x):
        return v * x

    report = check_tpu_compatible(step, tf.constant(3.0), strategy=one_core)
    assert report.ok, str(report)
    assert report.compiled is True
    assert float(one_core.run(tf.function(lambda: step(tf.constant(3.0))))) == 6.0
