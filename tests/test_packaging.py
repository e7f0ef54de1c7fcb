"""What a user's tools see of the installed package: its version, its types, its lazy names."""

import ast
import importlib
import importlib.metadata
import os
import pathlib
import re

import pytest

import compat_distribute
import compat_distribute.testing

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _type_checking_imports(package):
    """(module, name) pairs imported under `if typing.TYPE_CHECKING:` in the package's __init__."""
    tree = ast.parse(pathlib.Path(package.__file__).read_text())
    blocks = [
        node for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "typing.TYPE_CHECKING"
    ]
    assert len(blocks) == 1, f"{package.__name__} needs one `if typing.TYPE_CHECKING:` block"
    return [
        (node.module, alias.name)
        for node in blocks[0].body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]


@pytest.mark.parametrize("package", [compat_distribute, compat_distribute.testing],
                         ids=lambda p: p.__name__)
def test_ides_see_every_lazy_name_from_the_module_that_defines_it(package):
    imports = _type_checking_imports(package)
    assert sorted(name for _, name in imports) == sorted(package.__all__)
    for module, name in imports:
        assert getattr(importlib.import_module(module), name) is getattr(package, name), (
            f"{package.__name__}.{name} is not {module}.{name}")


def test_version_is_the_installed_metadata():
    assert compat_distribute.__version__ == importlib.metadata.version("compat_distribute")
    assert "version = " + compat_distribute.__version__ in (ROOT / "setup.cfg").read_text()


def test_the_package_is_marked_typed_and_ships_the_marker():
    assert os.path.isfile(os.path.join(os.path.dirname(compat_distribute.__file__), "py.typed"))
    assert "compat_distribute = py.typed" in (ROOT / "setup.cfg").read_text()


def test_the_readme_installs_from_a_checkout_or_from_a_wheel_of_this_version():
    readme = (ROOT / "README.md").read_text()
    install = readme.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    assert "pip install -e ." in install
    # The name `pip wheel` gives this version's wheel (tools/wheel_check.py builds it so).
    wheel = f"dist/compat_distribute-{compat_distribute.__version__}-py3-none-any.whl"
    assert "python -m pip wheel --no-deps -w dist ." in install
    assert f'pip install "{wheel}[legacy]"' in install
    # No index has the package yet: no page may tell users to install it by name.
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert not re.search(r"pip install [^\n]*[\s\"']compat_distribute\b(?!-)", page.read_text()), page.name
