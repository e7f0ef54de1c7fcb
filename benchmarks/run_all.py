"""Runs every benchmark, each in its own process, then prints the README table.

`python benchmarks/run_all.py` (or `make bench`) reruns them all and rewrites
the README's benchmark block; `--only NAME` runs one. Each benchmark writes
results/<name>.json with a "table" of rows: measure, value, target.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
# bench_trace at 128 replicas runs for minutes (a fresh process a sample).
TIMEOUT_S = 1800


def benchmarks():
    return sorted(glob.glob(os.path.join(HERE, "bench_*.py")))


def run(path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, path], env=env, timeout=TIMEOUT_S, check=False)
    took = time.monotonic() - start
    print(f"# {os.path.basename(path)}: exit {proc.returncode} in {took:.0f} s", flush=True)
    return proc.returncode


def markdown():
    rows, machine = [], None
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
        with open(path) as f:
            data = json.load(f)
        machine = machine or data.get("machine")
        for row in data.get("table", []):
            rows.append(
                f"| {data['benchmark']} | {row['measure']} | {row['value']} | {row.get('target', '')} |"
            )
    lines = []
    if machine:
        lines.append(
            f"Measured on {machine['cpu']} ({machine['cores']} cores, {machine['gpus']} GPUs), "
            f"Python {machine['python']}, TensorFlow {machine['tensorflow']}."
        )
        lines.append("")
    lines += ["| benchmark | measure | value | target |", "|---|---|---|---|", *rows]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run only benchmarks/bench_ONLY.py")
    args = parser.parse_args(argv)
    paths = benchmarks()
    if args.only:
        paths = [p for p in paths if os.path.basename(p) == f"bench_{args.only}.py"]
        if not paths:
            parser.error(f"--only {args.only}: no benchmarks/bench_{args.only}.py")
    failed = [p for p in paths if run(p) != 0]
    table = markdown()
    print(table)
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
    import readme

    readme.update("bench", table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
