"""The real XLA compile, and TF's own messages attached to what the walk found.

It catches what the walk cannot see (shapes that must be compile-time constants).
"""

from __future__ import annotations

import dataclasses
import re

import tensorflow as tf

from compat_distribute.testing.xla_check import rules
from compat_distribute.testing.xla_check.report import TPUProblem
from compat_distribute.testing.xla_check.source import user_frame

_UNSUPPORTED_TEXT = re.compile(r"Detected unsupported operations")
_UNREGISTERED_TEXT = re.compile(r"No registered '(\w+)' OpKernel")
_NODE_TEXT = re.compile(r"\{\{node ([^}]+)\}\}|node `([^`]+)`")


def _xla_error_text(error: Exception) -> str:
    text = str(error)
    prefix = "Failed getting HLO text: '"
    if text.startswith(prefix):
        text = text[len(prefix) :].rstrip("'")
    # The stack TF appends is where this check rebuilt the op, not the user's line.
    return text.split("The op is created at:")[0].strip()


def compile_hlo(function, args, kwargs) -> str | None:
    """Compiles a `tf.function(jit_compile=True)` to HLO; TF's error text, or None when it compiles."""
    try:
        function.experimental_get_compiler_ir(*args, **kwargs)(stage="hlo")
    except (ValueError, tf.errors.OpError) as e:
        return _xla_error_text(e)
    return None


_op_message_cache: dict = {}


def _single_op_message(op) -> str | None:
    """TF's XLA error for `op` compiled alone (placeholder inputs)."""
    # A callback's attrs name a fresh token each trace: its type and inputs suffice.
    callback = rules.rule("python_callback").applies_to(op.type)
    key = (op.type, tuple(t.dtype for t in op.inputs), "" if callback else repr(op.node_def.attr))
    if key in _op_message_cache:
        return _op_message_cache[key]
    specs = [tf.TensorSpec(t.shape, t.dtype) for t in op.inputs]
    out_dtypes = [t.dtype for t in op.outputs]
    attrs = dict(op.node_def.attr.items())

    def alone(*inputs):
        graph = tf.compat.v1.get_default_graph()
        return graph.create_op(op.type, list(inputs), out_dtypes, attrs=attrs, name=op.type).outputs

    try:
        message = compile_hlo(tf.function(alone, jit_compile=True), specs, {})
    except Exception:  # pylint: disable=broad-except
        message = None  # An op that cannot be rebuilt alone: no TF text.
    _op_message_cache[key] = message
    return message


def attach_messages(walker, whole_message: str | None):
    """Gives each unsupported op TF's own message: the whole step's, if it names the op."""
    for index, entry in enumerate(walker.entries):
        if entry.kind != rules.UNSUPPORTED_OP:
            continue
        op = walker.problem_ops.get(index)
        message = None
        if whole_message and re.search(rf"\b{re.escape(entry.op_type)} \(", whole_message):
            message = whole_message
        elif op is not None:
            message = _single_op_message(op)
        if message:
            walker.entries[index] = dataclasses.replace(entry, tf_message=message)


def explain_compile_failure(walker, message: str, function: str):
    """Adds the whole-step compile failure when no walked entry accounts for it."""
    if _UNSUPPORTED_TEXT.search(message):
        named = set(_UNREGISTERED_TEXT.findall(message))
        host = rules.rule("host_round_trip")
        accounted = {e.op_type for e in walker.entries} | {t for t in named if host.applies_to(t)}
        if named and named <= accounted:
            return  # Already an entry (or a host op TPUStrategy outside-compiles).
    op_name = op_type = filename = lineno = None
    match = _NODE_TEXT.search(message)
    if match:
        op_name = match.group(1) or match.group(2)
        op = walker.ops.get(op_name)
        if op is not None:
            op_type = op.type
            filename, lineno = user_frame(op)
    rule = rules.rule("xla_compile")
    walker.entries.append(
        TPUProblem(
            rule.kind,
            op_type or "?",
            op_name or "?",
            function,
            filename,
            lineno,
            rule.reason(op_type or "?"),
            tf_message=message,
            rule=rule.name,
        )
    )
