"""Every generated block of README.md and docs/ is what its table gives today.

`tools/readme.py` names each block's page and generator; a block that differs
is stale: run `python tools/readme.py NAME`.
"""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _readme_tool():
    spec = importlib.util.spec_from_file_location("readme_tool", ROOT / "tools" / "readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


readme = _readme_tool()


@pytest.mark.parametrize("name", sorted(readme.GENERATORS))
def test_block_is_current(name):
    assert readme.block(name) == readme.GENERATORS[name]().strip(), (
        f"{readme.PAGES[name]}'s {name} block is stale: run `python tools/readme.py {name}`."
    )


def test_every_block_has_a_page_and_every_page_block_a_generator():
    assert set(readme.PAGES) == set(readme.GENERATORS)
    marked = {
        line.split(":start")[0].removeprefix("<!-- ")
        for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
        for line in page.read_text().splitlines()
        if line.startswith("<!-- ") and line.endswith(":start -->")
    }
    assert marked == set(readme.GENERATORS)


def test_a_changed_row_makes_its_block_stale(monkeypatch):
    from compat_distribute import _env

    row = _env.VARIABLES[0]
    changed = _env.Variable(**{**row.__dict__, "shown_default": "eight"})
    monkeypatch.setattr(_env, "VARIABLES", (changed,) + _env.VARIABLES[1:])
    assert readme.block("settings") != readme.GENERATORS["settings"]().strip()
    assert "| eight |" in readme.GENERATORS["settings"]()
