"""Regenerates the README's generated blocks: `python tools/readme.py [members] [spellings] [xla_rules] [conformance] [bench]`.

A block sits between `<!-- NAME:start -->` and `<!-- NAME:end -->`.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")


def replace_block(text, name, content):
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    head, found, rest = text.partition(start)
    if not found or end not in rest:
        raise SystemExit(f"README.md has no {start} ... {end} block")
    return f"{head}{start}\n{content.strip()}\n{end}{rest.partition(end)[2]}"


def update(name, content):
    with open(README) as f:
        text = f.read()
    with open(README, "w") as f:
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
        "xla_rules": xla_rules,
        "conformance": conformance,
        "bench": bench,
    }
    for block in sys.argv[1:] or ["members", "spellings", "xla_rules", "conformance"]:
        update(block, blocks[block]())
