"""Regenerates the docs' generated blocks: `python tools/readme.py [members] [spellings] [contrib] [xla_rules] [conformance] [bench]`.

A block sits between `<!-- NAME:start -->` and `<!-- NAME:end -->` in the page
`PAGES` names for it; the tests that keep a table current read it with `block`.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Which page of docs/ holds each generated block.
PAGES = {
    "members": "docs/migration.md",
    "spellings": "docs/migration.md",
    "contrib": "docs/migration.md",
    "xla_rules": "docs/xla-check.md",
    "conformance": "docs/fake-tpu.md",
    "bench": "docs/benchmarks.md",
}


def page(name):
    """The path of the page that holds block `name`."""
    return os.path.join(ROOT, PAGES[name])


def block(name):
    """The current text of block `name`, without its markers."""
    with open(page(name)) as f:
        text = f.read()
    start, end = f"<!-- {name}:start -->\n", f"\n<!-- {name}:end -->"
    if start not in text or end not in text:
        raise SystemExit(f"{PAGES[name]} has no {start.strip()} ... {end.strip()} block")
    return text.split(start, 1)[1].split(end, 1)[0]


def replace_block(text, name, content):
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    head, found, rest = text.partition(start)
    if not found or end not in rest:
        raise SystemExit(f"{PAGES[name]} has no {start} ... {end} block")
    return f"{head}{start}\n{content.strip()}\n{end}{rest.partition(end)[2]}"


def update(name, content):
    with open(page(name)) as f:
        text = f.read()
    with open(page(name), "w") as f:
        f.write(replace_block(text, name, content))


def members():
    sys.path.insert(0, ROOT)
    from compat_distribute import _members

    return _members.migration_table()


def xla_rules():
    sys.path.insert(0, ROOT)
    from compat_distribute.testing.xla_check import rules

    return rules.readme_table()


def spellings():
    sys.path.insert(0, ROOT)
    from compat_distribute import _routing

    return _routing.spellings_markdown()


def contrib():
    sys.path.insert(0, ROOT)
    from compat_distribute import _contrib

    return _contrib.markdown()


def bench():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import run_all

    return run_all.markdown()


def conformance():
    sys.path.insert(0, os.path.join(ROOT, "tests", "conformance"))
    import conformance_table

    return conformance_table.markdown()


if __name__ == "__main__":
    blocks = {
        "members": members,
        "spellings": spellings,
        "contrib": contrib,
        "xla_rules": xla_rules,
        "conformance": conformance,
        "bench": bench,
    }
    for block in sys.argv[1:] or ["members", "spellings", "contrib", "xla_rules", "conformance"]:
        update(block, blocks[block]())
