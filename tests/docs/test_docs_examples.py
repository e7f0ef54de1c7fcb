"""Every ```python block of README.md and docs/*.md runs as written.

A block runs as a script (`python example.py`) in an empty directory, with this
tree's package first on the path, forked from a warm interpreter that has
imported TensorFlow (conftest's `run_program`). The pytest blocks are test files
of one `pytest` run in a fresh process (pytest's plugin is about a fresh
interpreter's start), and each block's test checks its own file's outcomes.
An HTML comment on the line before a block changes how it runs:

    <!-- run: pytest -->      the block is a test file: `pytest test_example.py` must pass
    <!-- needs: cluster -->   it starts worker processes (marked multi_worker)
    <!-- needs: pod -->       it starts a fake pod's host processes (marked multi_worker)
"""

import os
import pathlib
import re
import textwrap
import xml.etree.ElementTree as ElementTree

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


def _env():
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _file_name(block_id):
    """The test file of the pytest block `block_id` ("docs/plugin.md:43" -> test_docs_plugin_md_43.py)."""
    return "test_" + re.sub(r"\W", "_", block_id) + ".py"


@pytest.fixture(name="pytest_blocks", scope="module")
def pytest_blocks_fixture(request, tmp_path_factory, run_program):
    """The one `pytest` run of every selected pytest block: (CompletedProcess,
    {file name: {test name: outcome}}), outcomes from its JUnit XML report."""
    project = tmp_path_factory.mktemp("pytest_blocks")
    files = []
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is request.module and ("run", "pytest") in params.get("directives", ()):
            files.append(_file_name(item.callspec.id))
            (project / files[-1]).write_text(params["code"])
    argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=report.xml", *files]
    result = run_program(argv, cwd=project, env=_env(), timeout=TIMEOUT_S, fresh=True)
    outcomes = {name: {} for name in files}
    report = project / "report.xml"
    for case in ElementTree.parse(report).iter("testcase") if report.exists() else ():
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        module = case.get("classname").split(".")[0]  # A test class would follow the module.
        outcomes[module + ".py"][case.get("name")] = kinds[0] if kinds else "passed"
    return result, outcomes


@pytest.mark.parametrize("code, directives", list(_blocks()))
def test_block_runs(code, directives, tmp_path, run_program, request):
    if ("run", "pytest") in directives:
        result, outcomes = request.getfixturevalue("pytest_blocks")
        mine = outcomes[_file_name(request.node.callspec.id)]
        output = f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        assert "passed" in mine.values(), output
        assert {n: o for n, o in mine.items() if o in ("failure", "error")} == {}, output
        # Status 1: a test failed, in another block's file then.
        others_failed = any(o in ("failure", "error") for f in outcomes.values() for o in f.values())
        assert result.returncode == 0 or (result.returncode == 1 and others_failed), output
        return
    (tmp_path / "example.py").write_text(code)
    result = run_program(["example.py"], cwd=tmp_path, env=_env(), timeout=TIMEOUT_S,
                         shared_env=True)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


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
