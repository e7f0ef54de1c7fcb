"""The XLA check's rule table: each rule decides for a real op, and the README shows the table."""

import os

import pytest
import tensorflow as tf

from compat_distribute.testing import check_graph, check_tpu_compatible
from compat_distribute.testing.xla_check import rules, walker

X = tf.constant([1.0, -2.0, 3.0, -4.0])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository


def collective_step(x):
    return tf.raw_ops.CollectiveReduceV2(
        input=x,
        group_size=tf.constant(1),
        group_key=tf.constant(1),
        instance_key=tf.constant(1),
        ordering_token=[],
        merge_op="Add",
        final_op="Id",
    )


def print_step(x):
    tf.print(x)
    return x


def string_return_step(x):
    del x
    return "done"


def string_assert_step(x):
    with tf.control_dependencies([tf.debugging.assert_less(x, 100.0, message="too big")]):
        return x * 2.0


# rule -> (a step, the type of the op the rule decides about, that op's output dtype or None)
EXAMPLES = {
    "host_round_trip": (print_step, "PrintV2", None),
    "cross_replica": (collective_step, "CollectiveReduceV2", None),
    "python_callback": (lambda x: tf.py_function(lambda a: a, [x], tf.float32), "EagerPyFunc", None),
    "fed_off_tpu": (lambda x: tf.cast(x, tf.float64) * 2.0, "Mul", None),
    "no_xla_kernel": (tf.strings.as_string, "AsString", None),
    "xla_kernel_refuses_dtypes": (lambda x: tf.math.cumsum(tf.cast(x, tf.uint8)), "Cumsum", None),
    "string_constant": (string_assert_step, "Const", tf.string),
    "returns_string": (string_return_step, "_Retval", None),
    "unsupported_dtype": (lambda x: tf.cast(x, tf.float64), "Cast", None),
    "data_dependent_shape": (lambda x: tf.boolean_mask(x, x > 0), "Where", None),
    "xla_compile": (lambda x: tf.zeros(tf.cast(tf.reduce_sum(tf.abs(x)), tf.int32)), "Fill", None),
}


def the_op(step, op_type, dtype):
    graph = tf.function(step, autograph=False).get_concrete_function(tf.TensorSpec([4], tf.float32)).graph
    found = [
        op
        for op in graph.get_operations()
        if op.type == op_type and (dtype is None or op.outputs[0].dtype == dtype)
    ]
    assert found, f"no {op_type} op in {[op.type for op in graph.get_operations()]}"
    return found[0]


def test_every_rule_has_an_example_and_a_unique_name():
    names = [rule.name for rule in rules.RULES]
    assert len(names) == len(set(names))
    assert set(EXAMPLES) == set(names)


@pytest.mark.parametrize("rule", rules.RULES, ids=lambda rule: rule.name)
def test_rule_decides(rule):
    step, op_type, dtype = EXAMPLES[rule.name]
    if rule.test not in rules.STEP_TESTS:
        # The first rule that applies decides: e.g. a py_function also has no
        # XLA kernel, but is reported as the Python callback it is.
        assert walker.rule_for(the_op(step, op_type, dtype)) is rule
    report = check_tpu_compatible(step, X)
    entries = [e for e in report.problems + report.warnings if e.op_type == op_type]
    if rule.kind is None:
        assert entries == [], str(report)
        return
    assert [(e.rule, e.kind) for e in entries] == [(rule.name, rule.kind)], str(report)
    dtypes = ", ".join(sorted(rule.dtypes or ["float64"]))
    assert entries[0].reason.startswith(rule.why.format(op_type=op_type, dtypes=dtypes)), entries[0]
    assert entries[0] in (report.problems if rule.kind in rules.PROBLEM_KINDS else report.warnings)


def test_accepted_ops_leave_a_clean_report():
    # Walked only: a collective in a single-device compile needs a group.
    assert check_graph(tf.function(collective_step).get_concrete_function(X)).ok
    report = check_tpu_compatible(string_assert_step, X)
    assert report.ok and report.warnings == () and report.compiled is True, str(report)
    # One float64 cast, many float64 ops after it: one entry, at the cast.
    report = check_tpu_compatible(lambda x: tf.reduce_sum(tf.cast(x, tf.float64) * 2.0 + 1.0), X)
    assert [(p.rule, p.op_type) for p in report.problems] == [("unsupported_dtype", "Cast")]


def test_a_rule_says_what_to_do_per_op():
    rule = rules.rule("data_dependent_shape")
    assert rule.reason("Where").endswith("keep the shape with tf.where(mask, x, 0) and a masked reduction")
    assert rule.reason("UniqueV2").endswith("; prefer ops whose output shape is static")
    assert rules.rule("unsupported_dtype").reason("Cast", ("complex128", "float64")) == (
        "produces complex128, float64, which the TPU does not support; "
        "use float32/bfloat16 (or int32/int64) inside the step"
    )


def test_rules_apply_to_op_patterns_and_exceptions():
    assert rules.rule("cross_replica").applies_to("CollectiveGatherV2")
    assert rules.rule("cross_replica").applies_to("NcclAllReduce")
    assert not rules.rule("cross_replica").applies_to("AllReduce")
    assert rules.rule("no_xla_kernel").applies_to("AsString")
    assert not rules.rule("no_xla_kernel").applies_to("_Arg")


def test_a_malformed_rule_is_refused():
    with pytest.raises(ValueError, match="rule 'x': unknown test 'dtype'"):
        rules.Rule("x", "dtype", None, "why")
    with pytest.raises(ValueError, match="rule 'x': dtypes only apply to the tests"):
        rules.Rule("x", rules.OP, None, "why", dtypes=frozenset(["string"]))


def test_a_new_rule_is_one_row_of_the_table(monkeypatch):
    def cumsum_step(x):
        return tf.math.cumsum(x)  # the line the new rule reports

    line = cumsum_step.__code__.co_firstlineno + 1
    assert check_tpu_compatible(cumsum_step, X).ok
    new = rules.Rule(
        "no_cumsum_on_our_pods",
        rules.OP,
        rules.UNSUPPORTED_OP,
        "{op_type} times out on our pods",
        "sum with tf.math.segment_sum",
        ops=("Cumsum",),
    )
    monkeypatch.setattr(rules, "RULES", (new,) + rules.RULES)  # the one change
    report = check_tpu_compatible(cumsum_step, X)
    (problem,) = report.problems
    assert (problem.rule, problem.op_type, problem.lineno) == ("no_cumsum_on_our_pods", "Cumsum", line)
    assert problem.reason == "Cumsum times out on our pods; sum with tf.math.segment_sum"
    assert rules.rule("no_cumsum_on_our_pods") is new
    assert (
        "| `no_cumsum_on_our_pods` | `Cumsum` | problem (`unsupported_op`) | the op times out on "
        "our pods | sum with tf.math.segment_sum |"
    ) in rules.readme_table()


def test_a_rule_that_is_not_in_the_table_is_named_with_the_ones_that_are():
    with pytest.raises(KeyError, match=r"no XLA check rule is called 'nope'; the rules are \['host_round_trip'"):
        rules.rule("nope")


def test_docs_show_the_rule_table():
    with open(os.path.join(ROOT, "docs", "xla-check.md")) as f:
        text = f.read()
    block = text.split("<!-- xla_rules:start -->\n")[1].split("\n<!-- xla_rules:end -->")[0]
    assert block == rules.readme_table(), "run `python tools/readme.py xla_rules`"
    for rule in rules.RULES:
        assert f"| `{rule.name}` |" in block


def test_the_table_and_report_import_no_tensorflow(run_python):
    result = run_python(
        """
        import sys
        sys.path.insert(0, "tools")
        import readme
        table = readme.xla_rules()
        from compat_distribute.testing.xla_check import TPUProblem, TPUCompatibilityReport
        print(sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"), table.count("\\n| `"))
        """,
        fresh=True,  # It asserts what a fresh interpreter has imported.
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", str(len(rules.RULES))]
