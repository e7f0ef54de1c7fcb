"""CPU seconds of each test, its own process's and every process it started.

As a pytest plugin, it writes one JSON line a test to $SUITE_CPU_DIR/<worker>.jsonl:
the test's wall time and the CPU time (user + system) that this process, the
processes it reaped and its live descendants (warm interpreters, pod hosts,
cluster tasks) used during it. Module fixtures count in the test that starts
or ends them.

    PYTHONPATH=$PWD:$PWD/tools python -m pytest -p suite_cpu -n 3 --dist loadfile tests
    python tools/suite_cpu.py $SUITE_CPU_DIR       # CPU and wall per folder and file

docs/benchmarks.md ("Suite time") holds the table this gave.
"""

import collections
import glob
import json
import os
import resource
import sys
import time

import pytest

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_DEFAULT_DIR = "build/suite-cpu"  # build/ is ignored by git


def _descendants_cpu(root):
    """CPU seconds of `root`'s live descendants, read from /proc (their reaped children's too)."""
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # Ended while we looked.
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry)
        parents[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / _CLOCK_TICKS  # utime stime cutime cstime
    children = collections.defaultdict(list)
    for pid, parent in parents.items():
        children[parent].append(pid)
    total, todo = 0.0, list(children[root])
    while todo:
        pid = todo.pop()
        total += cpu[pid]
        todo.extend(children[pid])
    return total


def _tree_cpu():
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        used = resource.getrusage(who)
        total += used.ru_utime + used.ru_stime
    return total + _descendants_cpu(os.getpid())


def _write(record):
    folder = os.environ.get("SUITE_CPU_DIR", _DEFAULT_DIR)
    os.makedirs(folder, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(folder, worker + ".jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Times the test (setup, call and teardown) around pytest's own protocol."""
    del nextitem
    cpu, wall = _tree_cpu(), time.monotonic()
    try:
        return (yield)
    finally:
        _write({"id": item.nodeid, "cpu": _tree_cpu() - cpu, "wall": time.monotonic() - wall})


def summary(folder):
    """Lines of a table: CPU and wall seconds and test counts, per folder then per file."""
    files = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for path in glob.glob(os.path.join(folder, "*.jsonl")):
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                row = files[record["id"].split("::")[0]]
                row[0] += record["cpu"]
                row[1] += record["wall"]
                row[2] += 1
    folders = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for name, row in files.items():
        parts = name.split("/")
        folder_row = folders["/".join(parts[:2]) if len(parts) > 2 else "tests/*.py"]
        for i, value in enumerate(row):
            folder_row[i] += value
    lines = ["| folder or file | CPU s | wall s | tests |", "|---|---|---|---|"]
    for table in (folders, files):
        for name, (cpu, wall, count) in sorted(table.items(), key=lambda kv: -kv[1][0]):
            lines.append(f"| {name} | {cpu:.1f} | {wall:.1f} | {count} |")
    total = sum(row[0] for row in files.values())
    lines.append(f"| total | {total:.1f} | | {sum(row[2] for row in files.values())} |")
    return lines


if __name__ == "__main__":
    print("\n".join(summary(sys.argv[1] if len(sys.argv) > 1 else _DEFAULT_DIR)))
