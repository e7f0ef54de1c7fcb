"""The README's conformance table, generated from the tests in this directory.

Each `test_*` function is one behaviour: its docstring's first line says what
TensorFlow's test asserts on a TPU, a line `TF: <file> <test>` names that test,
and a decorator from `conformance_support` qualifies the result (`PASSES_WITH`):
`@device_names_differ` where the restatement leaves out TF's TPU device names,
`@strict_mode_only` where the fake passes only in strict mode, and
`@by_design("...")` what the fake does differently on purpose. The table is read
from the source (no TensorFlow needed); the tests themselves prove the rows.
`python tools/readme.py conformance` rewrites the README block.
"""

import ast
import pathlib

HERE = pathlib.Path(__file__).resolve().parent


PASS = "pass"
BY_DESIGN = "by design"
# Decorator name -> the row's result.
PASSES_WITH = {
    "device_names_differ": "pass, device names differ",
    "strict_mode_only": "pass in strict mode only",
}


def _result(function):
    results = []
    for decorator in function.decorator_list:
        if (
            isinstance(decorator, ast.Call)
            and getattr(decorator.func, "id", None) == "by_design"
            and decorator.args
        ):
            results.append(f"{BY_DESIGN}: {decorator.args[0].value}")
        elif isinstance(decorator, ast.Name) and decorator.id in PASSES_WITH:
            results.append(PASSES_WITH[decorator.id])
    if len(results) > 1:
        raise ValueError(f"{function.name} has more than one result: {results}")
    return results[0] if results else PASS


def rows():
    """(behaviour, TF test, result) for every conformance test, in file order."""
    found = []
    for path in sorted(HERE.glob("test_conformance_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            doc = ast.get_docstring(node) or ""
            lines = doc.splitlines()
            tf_tests = [line[len("TF: "):].strip() for line in lines if line.startswith("TF: ")]
            if not lines or not tf_tests:
                raise ValueError(
                    f"{path.name}::{node.name} needs a docstring: the behaviour on its first "
                    f"line and a 'TF: <file> <test>' line naming the TensorFlow test."
                )
            found.append((lines[0], "; ".join(tf_tests), _result(node)))
    return found


def counts():
    """Rows per result: `pass`, each `PASSES_WITH` result, and `by design`."""
    results = [result for _, _, result in rows()]
    found = {kind: results.count(kind) for kind in (PASS, *PASSES_WITH.values())}
    found[BY_DESIGN] = sum(r.startswith(f"{BY_DESIGN}: ") for r in results)
    return found


def markdown():
    lines = [
        "| Behaviour (as on a TPU) | TensorFlow test | Fake TPU |",
        "|---|---|---|",
    ]
    lines += [f"| {b} | `{t}` | {r} |" for b, t, r in rows()]
    c = counts()
    passed = c[PASS] + sum(c[kind] for kind in PASSES_WITH.values())
    devices, strict = (c[PASSES_WITH[name]] for name in ("device_names_differ", "strict_mode_only"))
    lines.append("")
    lines.append(
        f"{sum(c.values())} behaviours: {passed} pass ({devices} with device names that differ, "
        f"{strict} only in strict mode), {c[BY_DESIGN]} by design. "
        f"Each row is a test in `tests/conformance/`, run on the fake in every suite run and "
        f"on a real TPU with `--tpu=auto`."
    )
    return "\n".join(lines)
