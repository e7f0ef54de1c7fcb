"""Every ```python block of README.md and docs/*.md runs as written, each in a process of its own.

A block runs as a script (`python example.py`) in an empty directory, with this
tree's package first on the path, forked from a warm interpreter that has
imported TensorFlow (conftest's `run_program`); a pytest block runs in a fresh
process (pytest's plugin is about a fresh interpreter's start). An HTML comment on the line before a block
changes how it runs:

    <!-- run: pytest -->      the block is a test file: `pytest test_example.py` must pass
    <!-- needs: cluster -->   it starts worker processes (marked multi_worker)
    <!-- needs: pod -->       it starts a fake pod's host processes (marked multi_worker)
"""

import os
import pathlib
import re
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 350
TIMEOUT_S = 300
FENCE = re.compile(r"^([ \t]*)```python\n(.*?)^[ \t]*```$", re.MULTILINE | re.DOTALL)
DIRECTIVE = re.compile(r"<!--\s*(run|needs):\s*([\w-]+)\s*-->")
DIRECTIVES = {("run", "pytest"), ("needs", "cluster"), ("needs", "pod")}


def _blocks():
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            directives = set(DIRECTIVE.findall(before))
            unknown = directives - DIRECTIVES
            assert not unknown, f"{page.name}:{line}: unknown directive {unknown}"
            marks = [pytest.mark.multi_worker] if ("needs", "cluster") in directives or (
                "needs", "pod") in directives else []
            yield pytest.param(textwrap.dedent(match.group(2)), directives,
                               id=f"{page.relative_to(ROOT)}:{line}", marks=marks)


@pytest.mark.parametrize("code, directives", list(_blocks()))
def test_block_runs(code, directives, tmp_path, run_program):
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    pytest_block = ("run", "pytest") in directives
    if pytest_block:
        (tmp_path / "test_example.py").write_text(code)
        argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_example.py"]
    else:
        (tmp_path / "example.py").write_text(code)
        argv = ["example.py"]
    result = run_program(argv, cwd=tmp_path, env=env, timeout=TIMEOUT_S, fresh=pytest_block,
                         shared_env=True)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    if ("run", "pytest") in directives:
        assert re.search(r"\d+ passed", result.stdout) and "failed" not in result.stdout, result.stdout


def test_the_readme_shows_each_use():
    blocks = [m.group(2) for m in FENCE.finditer((ROOT / "README.md").read_text())]
    for name in ("install()", "fake_tpu(", "local_cluster(", "def test_"):
        assert any(name in block for block in blocks), f"README.md lost its {name} example"


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move details to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", page.read_text()):
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
