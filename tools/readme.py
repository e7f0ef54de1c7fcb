"""Regenerates the docs' generated blocks: `python tools/readme.py [NAME ...]` (default: all).

A block sits between `<!-- NAME:start -->` and `<!-- NAME:end -->` in the page
`PAGES` names for it, and `GENERATORS[NAME]` writes it from its table (the
package's tables, benchmarks/results). tests/docs/test_generated_blocks.py
fails when a block differs from what its generator writes now.
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
    "settings": "docs/settings.md",
    "options": "docs/plugin.md",
    "readme_options": "README.md",
    "presets": "docs/fake-tpu.md",
    "pod_presets": "docs/pods.md",
    "costs": "README.md",
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


def settings():
    sys.path.insert(0, ROOT)
    from compat_distribute import _env

    return _env.markdown()


def options():
    """The pytest plugin's options: each place, and the default (from the settings table)."""
    sys.path.insert(0, ROOT)
    from compat_distribute import _env
    from compat_distribute.testing.pytest import options as options_lib

    lines = [
        "| command line | environment variable | ini key | accepts | default |",
        "|---|---|---|---|---|",
    ]
    for option in options_lib.OPTIONS:
        row = _env.of_option(option.name)
        if option.is_switch:
            flag = f"`{option.flag}` / `{option.off_flag}`"
        else:
            flag = f"`{option.flag}={option.metavar}`".replace("|", "\\|")
        lines.append(
            f"| {flag} | `{option.env}` | `{option.name}` | {row.parse.accepts} | "
            f"{row.shown_default} |"
        )
    return "\n".join(lines)


def _preset_groups(pods):
    """[(names, preset)] of the presets with the same mesh and hosts, in table order."""
    sys.path.insert(0, ROOT)
    from compat_distribute.testing._fake_tpu import topologies

    groups = {}
    for name, preset in topologies.PRESETS.items():
        if (preset.hosts > 1) == pods:
            key = (preset.mesh_shape, preset.hosts, _cores_note(name, preset))
            groups.setdefault(key, []).append(name)
    return [(names, topologies.PRESETS[names[0]]) for names in groups.values()], topologies


def _cores_note(name, preset):
    if preset.mesh_shape[3] == 2:
        return " (2 TensorCores a chip)"
    if name.startswith(("v4", "v5p")):  # the generations whose two TensorCores are one device
        return " (megacore: a chip is one device)"
    return ""


def presets():
    """docs/fake-tpu.md's table of the one-host presets."""
    groups, topologies = _preset_groups(pods=False)
    lines = ["| Preset | Chips | TensorFlow devices (cores) | Mesh |", "|---|---|---|---|"]
    for names, preset in groups:
        shown = ", ".join(f"`{n}`" for n in names)
        if topologies.DEFAULT_TOPOLOGY in names:
            shown += " (default)"
        lines.append(
            f"| {shown} | {preset.chips} | {preset.cores}{_cores_note(names[0], preset)} | "
            f"`{preset.mesh_shape}` |"
        )
    return "\n".join(lines)


def pod_presets():
    """docs/pods.md's table of the pod presets."""
    groups, _ = _preset_groups(pods=True)
    lines = [
        "| Preset | Hosts | Chips | TensorFlow devices (cores) | Mesh |",
        "|---|---|---|---|---|",
    ]
    for names, preset in groups:
        lines.append(
            f"| {', '.join(f'`{n}`' for n in names)} | {preset.hosts} | {preset.chips} | "
            f"{preset.cores} ({preset.cores_per_host} a host) | `{preset.mesh_shape}` |"
        )
    return "\n".join(lines)


def costs():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import run_all

    return run_all.costs()


GENERATORS = {
    "members": members,
    "spellings": spellings,
    "contrib": contrib,
    "xla_rules": xla_rules,
    "conformance": conformance,
    "bench": bench,
    "settings": settings,
    "options": options,
    "readme_options": options,
    "presets": presets,
    "pod_presets": pod_presets,
    "costs": costs,
}


if __name__ == "__main__":
    for name in sys.argv[1:] or GENERATORS:
        update(name, GENERATORS[name]())
