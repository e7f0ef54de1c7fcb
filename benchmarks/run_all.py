"""Runs every benchmark, each in its own process, then prints the README table.

`python benchmarks/run_all.py` (or `make bench`) reruns them all and rewrites
docs/benchmarks.md's table and the README's "What it costs"; `--only NAME` runs
one. Each benchmark writes
results/<name>.json with a "table" of rows: measure, value, target.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import textwrap
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


def _results(name):
    with open(os.path.join(RESULTS, f"{name}.json")) as f:
        return json.load(f)["results"]


def _s(seconds):
    """Seconds as the README gives them: 2.9, 12.0."""
    return f"{seconds:.1f}"


def _ms(milliseconds):
    return f"{milliseconds:.3g}"


def _median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def costs():
    """The README's "What it costs" bullets, from results/*.json."""
    step = _results("fake_tpu")["fake run vs MirroredStrategy run: one step per tf.function call"]
    mwms = _results("shim")["MWMS run step (tf.function, all-reduce)"]["ratio"]
    cluster = _results("cluster")
    by_hand = cluster["start to first all-reduce (2 workers): local_cluster / by hand"]
    fresh = cluster["start to first all-reduce (2 workers): zygote / fresh processes"]["baseline_s"]
    trace = _results("trace")

    def first(kind, n):
        return trace[f"{kind} x{n}"]["first_call_s"]["median"]

    def warm(kind, n):
        return _ms(trace[f"{kind} x{n}"]["warm_step_s"]["median"] * 1e3)

    pods = _results("pods")
    starts = pods["v3-32 start-up (s, CPU s), hosts forked by a zygote"]
    fresh_starts = pods["v3-32 start-up (s, CPU s), hosts as fresh processes"]
    v5e = pods["v5litepod-32 start-up to first all-reduce, s"]
    cpu1 = {k: _ms(v) for k, v in pods["train1 CPU ms a step, all processes"].items()}
    cpu10 = {k: _ms(v) for k, v in pods["train10 CPU ms a step, all processes"].items()}
    wall1, wall10 = (pods[f"v3-32 pod train{n} vs v3-8"]["ratio"] for n in (1, 10))
    exits = _results("input_exit")
    teardown = {
        k.removeprefix("teardown (s): "): _s(v["median"])
        for k, v in exits.items()
        if k.startswith("teardown (s): ")
    }
    plugin = teardown["pytest session, plugin's tpu_strategy (v3-8 fake)"]
    with_fix, without = (
        exits[f"(d) input rate {w} the fix (elements/s)"]["median"] for w in ("with", "without")
    )
    rate = exits["(d) median rate, with / without the fix"]
    smoke = _results("smoke")
    wall = smoke["wall (process start to exit)"]
    bullets = [
        f"* a step on the fake TPU takes {step['ratio']:.2f} times as long as the same step on a "
        f"raw `MirroredStrategy` ({step['candidate_s'] * 1e6:,.0f} us against "
        f"{step['baseline_s'] * 1e6:,.0f} us); the multi-worker shim's step {mwms:.3f} times "
        f"TensorFlow's own;",
        f"* a two-worker `local_cluster` starts to its first all-reduce in "
        f"{_s(by_hand['candidate_s'])} s ({_s(fresh)} s when each task imports TensorFlow itself, "
        f"{_s(by_hand['baseline_s'])} s for the same cluster launched by hand);",
        f"* a Keras training step's first call (trace and first run; the fake traces the step "
        f"once, as a TPU compiles it once): {first('once', 8):.2f} s on 8 replicas, "
        f"{first('once', 32):.2f} s on 32 and {_s(first('once', 128))} s on 128, against "
        f"{first('mirrored', 8):.2f}, {first('mirrored', 32):.2f} and "
        f"{_s(first('mirrored', 128))} s on a raw `MirroredStrategy`, which traces it once per "
        f"replica; warm steps {warm('once', 32)} ms on 32 replicas and {warm('once', 128)} ms on "
        f"128, against {warm('mirrored', 32)} and {warm('mirrored', 128)} ms;",
        f"* a v3-32 fake pod (4 host processes) starts in {_s(_median(w for w, _ in starts))} s "
        f"(median of {len(starts)}; {_s(_median(w for w, _ in fresh_starts))} s when each host "
        f"imports TensorFlow itself, `COMPAT_DISTRIBUTE_ZYGOTE=0`), an 8-host v5litepod-32 in "
        f"{_s(v5e)} s; a Keras training step costs the machine {cpu1['pod']} ms of CPU over all "
        f"its processes, against {cpu1['hosts=1']} ms for the same 32 replicas in one process and "
        f"{cpu1['v3-8']} ms for a v3-8 ({cpu10['pod']}, {cpu10['hosts=1']} and {cpu10['v3-8']} ms "
        f"a step at ten steps a call); in wall time that is {wall1:.1f} times a v3-8's step at "
        f"one step a call and {wall10:.1f} times at ten;",
        f"* distributed input runs without tf.data autotuning, so no dying iterator waits on its "
        f"thread: after {exits['seconds fed']} s of feeding a v3-8 fake, dropping the iterator "
        f"and exiting took {teardown['v3-8 fake, experimental_distribute_dataset']} s against "
        f"{teardown['plain tf.data, one device']} s for a plain one-device tf.data program "
        f"(Keras 3 `fit`: {teardown['Keras 3 fit, v3-8 fake']} s against "
        f"{teardown['Keras 3 fit, no strategy']} s; a pytest session with the plugin {plugin} s "
        f"against {teardown['pytest session, plain tf.data test']} s); the input rate with and "
        f"without this is {rate:.2f} ({with_fix:,.0f} against {without:,.0f} elements/s, within "
        f"noise);",
        f"* `compat-distribute smoke` on the fake v3-8, start to exit: min {_s(wall['min_s'])} s, "
        f"median {_s(wall['median_s'])} s, max {_s(wall['max_s'])} s over {smoke['runs']} runs.",
    ]
    wrap = textwrap.TextWrapper(width=99, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(wrap.fill(bullet) for bullet in bullets)


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
    readme.update("costs", costs())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
