"""docs/clusters.md's comparison table: each row names the test that shows it, and that test exists."""

import ast
import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent
PAGE = HERE.parents[1] / "docs" / "clusters.md"


def _rows():
    text = PAGE.read_text()
    section = text[text.index("## Compared with TensorFlow's and PyTorch's runners") :]
    table = section.split("\n## ", 1)[0]  # Up to the next section.
    return [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| |")]


def test_each_row_of_the_comparison_names_tests_that_exist():
    rows = _rows()
    assert len(rows) >= 20
    defined = {}
    for row in rows:
        shown_by = row.rstrip(" |").rsplit(" | ", 1)[1]
        names = re.findall(r"`(test_cluster_\w+\.py)::(\w+)`", shown_by)
        assert names, f"a row without its test: {row}"
        for file_name, test in names:
            if file_name not in defined:
                tree = ast.parse((HERE / file_name).read_text())
                defined[file_name] = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            assert test in defined[file_name], f"{file_name}::{test} (named in {PAGE.name}) does not exist"
