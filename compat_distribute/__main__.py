"""The `compat-distribute` command (also `python -m compat_distribute`).

`compat-distribute smoke` runs the checks of `compat_distribute.smoke` on a
fake TPU (default), a real TPU (`--tpu NAME`) or whatever is there
(`--tpu auto`), prints one line per check and exits 0 only if all passed.
Exit codes: 0 all passed, 1 a check failed or the hardware was unreachable,
2 bad command line.
"""

import argparse
import faulthandler
import json
import os
import sys
import threading

PROG = "compat-distribute"
DEFAULT_STEPS_PER_RUN = 4
DEFAULT_TIMEOUT_S = 300


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int (>= 1); got {text!r}")
    return value


def _positive_seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0; got {text!r}")
    return value


def build_parser():
    from compat_distribute import smoke  # pylint: disable=g-import-not-at-top

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="TF1 distribution code on TF2: tools.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    checks = "\n".join(f"  {c.name:<20} {c.what}" for c in smoke.CHECKS)
    sub = commands.add_parser(
        "smoke",
        help="run the smoke checks on a (fake) TPU or GPUs",
        description=(
            "Runs TF1-style distribution code through the compat_distribute\n"
            "shims and checks the results:\n" + checks
        ),
        epilog=(
            "Exit status: 0 when every check passed, 1 when one failed or the\n"
            "hardware could not be reached, 2 for a bad command line."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument(
        "--tpu",
        metavar="NAME",
        help="a real TPU (a TPUClusterResolver name, a grpc:// address or 'local'); "
        "'auto' picks a reachable TPU, else the local GPUs, else the fake TPU. "
        "Default: the fake TPU.",
    )
    sub.add_argument(
        "--topology",
        default=None,
        help=f"the fake TPU's topology (default {smoke.DEFAULT_TOPOLOGY}); see "
        "compat_distribute.testing.TOPOLOGIES for the presets",
    )
    sub.add_argument(
        "--steps-per-run",
        type=_positive_int,
        default=DEFAULT_STEPS_PER_RUN,
        metavar="N",
        help=f"the strategy's steps_per_run: steps per on-device loop (default "
        f"{DEFAULT_STEPS_PER_RUN})",
    )
    sub.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    sub.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up (and dump stacks) after this long (default {DEFAULT_TIMEOUT_S})",
    )
    # For testing the failure path: fails the named check after it ran.
    sub.add_argument("--inject-failure", choices=smoke.CHECK_NAMES, help=argparse.SUPPRESS)
    return parser, sub


def main(argv=None):
    parser, smoke_parser = build_parser()
    # Unknown flags are reported by the command's own parser, with its usage.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        smoke_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return _smoke(args, smoke_parser)


def _check_topology(args, parser):
    from compat_distribute import smoke  # pylint: disable=g-import-not-at-top

    if args.topology is None:
        args.topology = smoke.DEFAULT_TOPOLOGY
        return
    if args.tpu not in (None, "auto"):
        parser.error(
            f"argument --topology: applies to the fake TPU only; got --topology "
            f"{args.topology} with --tpu {args.tpu}. Drop --topology."
        )
    presets = smoke.topologies()
    if args.topology not in presets:
        parser.error(
            f"argument --topology: unknown topology {args.topology!r}; choose from "
            f"{', '.join(presets)}"
        )


def _say(text, stream=None):
    stream = stream or sys.stdout
    stream.write(text + "\n")
    stream.flush()


class _Watchdog:
    """Ends the process, with stacks on stderr, if the run outlives `seconds`."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.stage = "start-up"
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _fire(self):
        _say(
            f"{PROG} smoke: error: timed out after {self.seconds:g}s during {self.stage}; "
            f"stacks follow",
            sys.stderr,
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stdout.flush()
        os._exit(1)  # pylint: disable=protected-access

    def start(self):
        self._timer.start()
        return self

    def stop(self):
        self._timer.cancel()


def _smoke(args, parser):
    _check_topology(args, parser)
    # Before TensorFlow's runtime starts: logs, then the devices (the targets
    # create the virtual devices they need).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from compat_distribute import smoke  # pylint: disable=g-import-not-at-top

    watchdog = _Watchdog(args.timeout).start()
    try:
        return _run_smoke(args, smoke, watchdog)
    finally:
        watchdog.stop()


def _target(args, smoke):
    if args.tpu is None:
        return smoke.fake_tpu_target(args.topology, args.steps_per_run)
    if args.tpu == "auto":
        return smoke.auto_target(args.steps_per_run, args.topology)
    return smoke.tpu_target(args.tpu, args.steps_per_run)


def _run_smoke(args, smoke, watchdog):
    watchdog.stage = "setting up the hardware"
    try:
        target = _target(args, smoke)
    except smoke.Unreachable as e:
        reason = f"{PROG} smoke: error: {e}"
        if args.json:
            wanted = "TPU " + args.tpu if args.tpu else "fake TPU"
            _say(
                json.dumps(
                    {"ok": False, "device": wanted, "replicas": 0, "checks": [], "error": str(e)}
                )
            )
        _say(reason, sys.stderr)
        return 1

    if not args.json:
        _say(smoke.format_header(target))

    def on_result(result):
        if not args.json:
            _say(smoke.format_result(result))

    def on_start(name):
        watchdog.stage = f"check {name}"

    report = smoke.run_checks(
        target,
        inject_failure=args.inject_failure,
        progress=smoke.Progress(sys.stderr),
        on_start=on_start,
        on_result=on_result,
    )
    if args.json:
        _say(json.dumps(report.as_dict()))
        for failure in report.failures:
            _say(f"FAILED {failure.name}: {failure.detail}", sys.stderr)
    else:
        _say(smoke.format_footer(report))
    return 0 if report.ok else 1


def entry():
    """The console script: `main()`, then end the process.

    TensorFlow 2.21 can block for minutes at interpreter exit destroying
    tf.data iterators; the report is out by then, so skip that teardown.
    """
    code = main()
    # os._exit skips atexit: stop a fake TPU pod's hosts (and their directory) first.
    clusters = sys.modules.get("compat_distribute.testing.cluster.lifecycle")
    for cluster in clusters.running_clusters() if clusters else ():
        cluster.stop()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
