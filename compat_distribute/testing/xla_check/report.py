"""What the check found: one `TPUProblem` per finding, gathered in a `TPUCompatibilityReport`."""

from __future__ import annotations

import dataclasses

from compat_distribute.testing.xla_check import rules


@dataclasses.dataclass(frozen=True)
class TPUProblem:
    """One op a TPU cannot run as written, or runs at a cost.

    Attributes:
      kind: one of "unsupported_op", "unsupported_dtype", "xla_compile",
        "data_dependent_shape", "host_round_trip".
      op_type: the op's type, e.g. "AsString".
      op_name: the op's name in its graph.
      function: the name of the graph or function holding the op.
      filename: the user's file that created the op (None when TF recorded no
        traceback, e.g. for a graph loaded from a SavedModel).
      lineno: the line in `filename`.
      reason: what is wrong and what to do.
      tf_message: TF's own XLA error for this op, when compiling gave one.
      rule: the name of the rule in `rules.RULES` that found it.
    """

    kind: str
    op_type: str
    op_name: str
    function: str
    filename: str | None
    lineno: int | None
    reason: str
    tf_message: str | None = None
    rule: str | None = None

    @property
    def source(self) -> str | None:
        """`file:line` of the user's code that created the op, or None."""
        if self.filename is None:
            return None
        return f"{self.filename}:{self.lineno}"

    def __str__(self) -> str:
        where = self.source or f"op {self.op_name!r} in {self.function}"
        text = f"{where}: {self.op_type} ({self.op_name}): {self.reason}"
        if self.tf_message:
            text += "\n    TF: " + self.tf_message.replace("\n", "\n        ")
        return text


@dataclasses.dataclass(frozen=True)
class TPUCompatibilityReport:
    """What `check_tpu_compatible` / `check_graph` found.

    Attributes:
      function: the name of the checked function.
      problems: entries that make the step fail on a TPU.
      warnings: entries that compile but cost on a TPU.
      compiled: True when the whole replica computation compiled with XLA,
        False when it did not, None when it was not compiled as a whole.
      compile_message: TF's error when `compiled` is False, or why the whole
        computation was not compiled when `compiled` is None.
    """

    function: str
    problems: tuple[TPUProblem, ...]
    warnings: tuple[TPUProblem, ...]
    compiled: bool | None = None
    compile_message: str | None = None

    @classmethod
    def of(cls, function, entries, compiled=None, compile_message=None):
        """The report of `entries`, split into problems and warnings by kind."""
        problems = tuple(e for e in entries if e.kind in rules.PROBLEM_KINDS)
        warnings = tuple(e for e in entries if e.kind in rules.WARNING_KINDS)
        return cls(function, problems, warnings, compiled, compile_message)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            head = f"{self.function}: TPU compatible"
        else:
            head = f"{self.function}: {len(self.problems)} TPU problem(s)"
        lines = [head + (f", {len(self.warnings)} warning(s)" if self.warnings else "")]
        for title, entries in (("problems", self.problems), ("warnings", self.warnings)):
            if entries:
                lines.append(f"  {title}:")
                lines.extend("  - " + str(e).replace("\n", "\n    ") for e in entries)
        if self.compiled is False and self.problems and not any(p.tf_message for p in self.problems):
            lines.append("  XLA: " + (self.compile_message or ""))
        return "\n".join(lines)
