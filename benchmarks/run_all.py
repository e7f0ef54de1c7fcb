"""Runs every benchmark, each in its own process, then prints the README table.

`python benchmarks/run_all.py` (or `make bench`) reruns them all and rewrites
docs/benchmarks.md's table and the README's "What it costs"; `--only NAME` runs one. Each benchmark writes
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
    fake, shim = _results("fake_tpu"), _results("shim")
    step = fake["fake run vs MirroredStrategy run: one step per tf.function call"]
    mwms = shim["MWMS run step (tf.function, all-reduce)"]
    cluster = _results("cluster")
    by_hand = cluster["start to first all-reduce (2 workers): local_cluster / by hand"]
    fresh = cluster["start to first all-reduce (2 workers): zygote / fresh processes"]
    trace = _results("trace")
    first = {k: [trace[f"{k} x{n}"]["first_call_s"]["median"] for n in (8, 32, 128)] for k in ("once", "mirrored")}
    warm = {k: [trace[f"{k} x{n}"]["warm_step_s"]["median"] * 1e3 for n in (32, 128)] for k in ("once", "mirrored")}
    pods = _results("pods")
    zygote_starts = [wall for wall, _ in pods["v3-32 start-up (s, CPU s), hosts forked by a zygote"]]
    fresh_starts = [wall for wall, _ in pods["v3-32 start-up (s, CPU s), hosts as fresh processes"]]
    cpu1, cpu10 = pods["train1 CPU ms a step, all processes"], pods["train10 CPU ms a step, all processes"]
    exits = _results("input_exit")
    teardown = {k[len("teardown (s): "):]: v["median"] for k, v in exits.items() if k.startswith("teardown (s): ")}
    rates = [exits[f"(d) input rate {w} the fix (elements/s)"]["median"] for w in ("with", "without")]
    plugin = "pytest session, plugin's tpu_strategy (v3-8 fake)"
    smoke = _results("smoke")
    wall = smoke["wall (process start to exit)"]
    bullets = [
        f"* a step on the fake TPU takes {step['ratio']:.2f} times as long as the same step on a raw "
        f"`MirroredStrategy` ({step['candidate_s'] * 1e6:,.0f} us against {step['baseline_s'] * 1e6:,.0f} us); "
        f"the multi-worker shim's step {mwms['ratio']:.3f} times TensorFlow's own;",
        f"* a two-worker `local_cluster` starts to its first all-reduce in {_s(by_hand['candidate_s'])} s "
        f"({_s(fresh['baseline_s'])} s when each task imports TensorFlow itself, "
        f"{_s(by_hand['baseline_s'])} s for the same cluster launched by hand);",
        f"* a Keras training step's first call (trace and first run; the fake traces the step once, as a "
        f"TPU compiles it once): {first['once'][0]:.2f} s on 8 replicas, {first['once'][1]:.2f} s on 32 and "
        f"{_s(first['once'][2])} s on 128, against {first['mirrored'][0]:.2f}, {first['mirrored'][1]:.2f} and "
        f"{_s(first['mirrored'][2])} s on a raw `MirroredStrategy`, which traces it once per replica; warm "
        f"steps {_ms(warm['once'][0])} ms on 32 replicas and {_ms(warm['once'][1])} ms on 128, against "
        f"{_ms(warm['mirrored'][0])} and {_ms(warm['mirrored'][1])} ms;",
        f"* a v3-32 fake pod (4 host processes) starts in {_s(_median(zygote_starts))} s (median of "
        f"{len(zygote_starts)}; {_s(_median(fresh_starts))} s when each host imports TensorFlow itself, "
        f"`COMPAT_DISTRIBUTE_ZYGOTE=0`), an 8-host v5litepod-32 in "
        f"{_s(pods['v5litepod-32 start-up to first all-reduce, s'])} s; a Keras training step costs the "
        f"machine {_ms(cpu1['pod'])} ms of CPU over all its processes, against {_ms(cpu1['hosts=1'])} ms for "
        f"the same 32 replicas in one process and {_ms(cpu1['v3-8'])} ms for a v3-8 ({_ms(cpu10['pod'])}, "
        f"{_ms(cpu10['hosts=1'])} and {_ms(cpu10['v3-8'])} ms a step at ten steps a call); in wall time that "
        f"is {pods['v3-32 pod train1 vs v3-8']['ratio']:.1f} times a v3-8's step at one step a call and "
        f"{pods['v3-32 pod train10 vs v3-8']['ratio']:.1f} times at ten;",
        f"* distributed input runs without tf.data autotuning, so no dying iterator waits on its thread: "
        f"after {exits['seconds fed']} s of feeding a v3-8 fake, dropping the iterator and exiting took "
        f"{_s(teardown['v3-8 fake, experimental_distribute_dataset'])} s against "
        f"{_s(teardown['plain tf.data, one device'])} s for a plain one-device tf.data program (Keras 3 "
        f"`fit`: {_s(teardown['Keras 3 fit, v3-8 fake'])} s against {_s(teardown['Keras 3 fit, no strategy'])} s; "
        f"a pytest session with the plugin {_s(teardown[plugin])} s "
        f"against {_s(teardown['pytest session, plain tf.data test'])} s); the input rate with and without "
        f"this is {exits['(d) median rate, with / without the fix']:.2f} ({rates[0]:,.0f} against "
        f"{rates[1]:,.0f} elements/s, within noise);",
        f"* `compat-distribute smoke` on the fake v3-8, start to exit: min {_s(wall['min_s'])} s, median "
        f"{_s(wall['median_s'])} s, max {_s(wall['max_s'])} s over {smoke['runs']} runs.",
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
