"""The walk: every op of a graph and of every function it calls, tested against the rules (internal).

XLA stops at the first unsupported op; the walk finds all of them.
"""

from __future__ import annotations

import functools
import re
from typing import Any, NamedTuple

import tensorflow as tf

from compat_distribute.testing import _tf
from compat_distribute.testing.xla_check import kernels, rules
from compat_distribute.testing.xla_check.report import TPUProblem
from compat_distribute.testing.xla_check.source import user_frame

__all__ = ["Node", "Walker", "match", "node_of", "rule_for"]

# MirroredStrategy names each replica's copy of an op "replica_<i>/<name>".
_REPLICA_PREFIX = re.compile(r"^replica_\d+/")


class Node(NamedTuple):
    """What the rules see of one op, from a graph's `Operation` or a `FunctionDef`'s node."""

    type: str
    name: str
    function: str
    attrs: Any  # the NodeDef's attr map
    in_dtypes: tuple
    out_dtypes: tuple
    calls: tuple  # names of the functions it calls
    op: Any = None  # the Operation, when there is one (its source line; to compile it alone)


def _off_tpu(dtypes):
    names = [d.name for d in dtypes]
    if all(name in rules.TPU_DTYPES for name in names):
        return None
    return tuple(sorted({name for name in names if name not in rules.TPU_DTYPES}))


# Each test returns None when the op does not match, else the detail the
# reason names (the off-TPU dtypes, or nothing).
_TESTS = {
    rules.OP: lambda node: (),
    rules.FED_OFF_TPU: lambda node: _off_tpu(node.in_dtypes),
    rules.NO_XLA_KERNEL: lambda node: None if kernels.has_kernel(node.type) else (),
    rules.XLA_KERNEL_REFUSES: lambda node: (
        () if kernels.has_kernel(node.type) and not kernels.accepts(node.type, node.attrs) else None
    ),
    # A call, cond or loop returns what its body makes: the body is walked.
    rules.MAKES_OFF_TPU: lambda node: None if node.calls else _off_tpu(node.out_dtypes),
}


def _rules_for(op_type: str) -> tuple:
    """The per-op rules that apply to `op_type`, in table order."""
    return _rules_in(rules.RULES, op_type)


@functools.lru_cache(maxsize=4096)
def _rules_in(table: tuple, op_type: str) -> tuple:
    # Keyed on the table too: a table replaced at run time (a test's) is read afresh.
    return tuple(r for r in table if r.test not in rules.STEP_TESTS and r.applies_to(op_type))


def match(node: Node):
    """`(rule, detail)` for the first rule that applies to `node`, or `(None, None)`."""
    for rule in _rules_for(node.type):
        detail = _TESTS[rule.test](node)
        if detail is not None and (rule.dtypes is None or set(detail) <= rule.dtypes):
            return rule, detail
    return None, None


def _function_names(attrs):
    for value in attrs.values():
        if value.HasField("func"):
            yield value.func.name
        elif value.HasField("list"):
            for func in value.list.func:
                yield func.name


def _type_attr_dtypes(attrs):
    for value in attrs.values():
        if value.HasField("type"):
            yield tf.as_dtype(value.type)
        elif value.HasField("list"):
            for t in value.list.type:
                yield tf.as_dtype(t)


def node_of(op, function: str | None = None) -> Node:
    """The `Node` of a graph's `Operation`."""
    return Node(
        op.type,
        op.name,
        function or op.graph.name,
        op.node_def.attr,
        tuple(t.dtype for t in op.inputs),
        tuple(t.dtype for t in op.outputs),
        tuple(_function_names(op.node_def.attr)),
        op,
    )


def rule_for(op):
    """The rule that decides about a graph's `Operation` (None: no rule applies)."""
    return match(node_of(op))[0]


class Walker:
    """Visits every op of a graph and of every function it calls, once.

    `entries` are the report's entries in the order found; `ops` maps op names
    to operations (to place TF's messages); `problem_ops` maps an entry's index
    to its operation (to compile it alone).
    """

    def __init__(self):
        self.entries: list[TPUProblem] = []
        self.ops: dict = {}
        self.problem_ops: dict = {}
        self._seen_keys: set = set()
        self._seen_functions: set = set()

    def walk_graph(self, graph, outer=()):
        graphs = (graph,) + tuple(outer)
        for op in graph.get_operations():
            self.ops.setdefault(op.name, op)
            if op.type == "Placeholder" and outer:
                continue  # A called function's argument: checked where it is made.
            node = node_of(op, graph.name)
            self._check(node)
            for name in node.calls:
                self._walk_function(name, graphs)

    def _walk_function(self, name, graphs):
        if name in self._seen_functions:
            return
        self._seen_functions.add(name)
        function = next(filter(None, (_tf.graph_function(g, name) for g in graphs)), None)
        if function is None:
            return
        body = getattr(function, "graph", None)
        if body is not None:
            self.walk_graph(body, graphs)
            return
        # No FuncGraph (e.g. a loaded SavedModel): walk the FunctionDef, no lines.
        for node_def in function.definition.node_def:
            attrs = node_def.attr
            node = Node(
                node_def.op,
                node_def.name,
                name,
                attrs,
                (),
                tuple(_type_attr_dtypes(attrs)),
                tuple(_function_names(attrs)),
            )
            self._check(node)
            for inner in node.calls:
                self._walk_function(inner, graphs)

    def _check(self, node: Node):
        rule, detail = match(node)
        if rule is None or rule.kind is None:
            return
        # Looked up only here: finding the source line costs more than the rules.
        filename, lineno = user_frame(node.op) if node.op is not None else (None, None)
        # Without a source line, the op itself is the place; the copies a
        # multi-replica strategy makes of it (replica_1/..., ...) are one.
        if filename:
            where = (filename, lineno)
        else:
            where = (node.function, _REPLICA_PREFIX.sub("", node.name))
        key = (rule.kind, detail or node.type, where)
        if key in self._seen_keys:
            return
        self._seen_keys.add(key)
        if node.op is not None:
            self.problem_ops[len(self.entries)] = node.op
        self.entries.append(
            TPUProblem(
                rule.kind,
                node.type,
                node.name,
                node.function,
                filename,
                lineno,
                rule.reason(node.type, detail),
                rule=rule.name,
            )
        )
