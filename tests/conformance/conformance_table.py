"""The README's conformance table, generated from the tests in this directory.

Each `test_*` function is one behaviour: its docstring's first line says what a
TPU does, a line `TF: <file> <test>` names the TensorFlow test it restates, and
`@by_design("...")` marks what the fake does differently on purpose. The table
is read from the source (no TensorFlow needed); the tests themselves prove the
"pass" rows. `python tools/readme.py conformance` rewrites the README block.
"""

import ast
import pathlib

HERE = pathlib.Path(__file__).resolve().parent


def _by_design(function):
    for decorator in function.decorator_list:
        if (
            isinstance(decorator, ast.Call)
            and getattr(decorator.func, "id", None) == "by_design"
            and decorator.args
        ):
            return decorator.args[0].value
    return None


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
            reason = _by_design(node)
            result = "pass" if reason is None else f"by design: {reason}"
            found.append((lines[0], "; ".join(tf_tests), result))
    return found


def counts():
    results = [result for _, _, result in rows()]
    passed = results.count("pass")
    return {"pass": passed, "by design": len(results) - passed}


def markdown():
    lines = [
        "| Behaviour (as on a TPU) | TensorFlow test | Fake TPU |",
        "|---|---|---|",
    ]
    lines += [f"| {b} | `{t}` | {r} |" for b, t, r in rows()]
    c = counts()
    lines.append("")
    lines.append(
        f"{c['pass'] + c['by design']} behaviours: {c['pass']} pass, {c['by design']} by design. "
        f"Each row is a test in `tests/conformance/`, run on the fake in every suite run and "
        f"on a real TPU with `--tpu=auto`."
    )
    return "\n".join(lines)
