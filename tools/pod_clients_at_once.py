"""Runs K pod smoke clients at once for R rounds; keeps each failure's full output.

    python tools/pod_clients_at_once.py --clients 3 --rounds 10 --out /tmp/pods
    COMPAT_DISTRIBUTE_POD_NETWORK=host python tools/pod_clients_at_once.py ...

Each client is `python -m compat_distribute smoke --topology T --json`, a
process of its own with its own hosts. A client fails when it exits non-zero,
its report says "ok": false, or its output names an `Invalid incarnation`.
Every client's stdout and stderr are kept under --out (r<round>c<client>.out /
.err); the last line says `runs=N failures=F incarnation=I`. Each client runs
in a session of its own and is killed with its process group (hosts and relay
included) past --timeout; the exit status is 1 when any client failed.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

from compat_distribute import _env

INCARNATION = "Invalid incarnation"


def _run_round(args, round_index, env):
    clients = []
    for index in range(args.clients):
        stem = os.path.join(args.out, f"r{round_index}c{index}")
        with open(stem + ".out", "w") as out, open(stem + ".err", "w") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "compat_distribute", "smoke", "--topology", args.topology,
                 "--json"],
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,  # its own process group: hosts and relay included
            )
        clients.append((index, stem, process))
    deadline = time.monotonic() + args.timeout
    results = []
    for index, stem, process in clients:
        try:
            code = process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
        with open(stem + ".out") as out, open(stem + ".err") as err:
            text = out.read() + err.read()
        failed = code != 0 or '"ok": false' in text or INCARNATION in text
        results.append((index, code, failed, INCARNATION in text))
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=_env.argument_type(_env.Count(8)), default=3)
    parser.add_argument("--rounds", type=_env.argument_type(_env.Count(100)), default=10)
    parser.add_argument("--topology", default="v4-16")
    parser.add_argument("--timeout", type=_env.argument_type(_env.Number(_env.MAX_SECONDS)),
                        default=600.0, help="seconds a round may take")
    parser.add_argument("--out", required=True, help="directory for each client's output")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    runs = failures = incarnations = 0
    for round_index in range(args.rounds):
        started = time.monotonic()
        for index, code, failed, incarnation in _run_round(args, round_index, env):
            runs += 1
            failures += failed
            incarnations += incarnation
            print(
                f"round {round_index} client {index}: exit {code}"
                f"{' FAILED' if failed else ''}{' (Invalid incarnation)' if incarnation else ''}",
                flush=True,
            )
        print(f"round {round_index}: {time.monotonic() - started:.0f} s", flush=True)
    print(f"runs={runs} failures={failures} incarnation={incarnations}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
