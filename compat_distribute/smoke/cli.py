"""The `compat-distribute` command (also `python -m compat_distribute`, see `__main__`).

`compat-distribute smoke` runs the checks of `compat_distribute.smoke` on the
fake TPU (default), a real TPU (`--tpu NAME`) or whatever is here
(`--tpu auto`), prints one line per check and exits 0 only if all passed.
Exit codes: 0 all passed, 1 a check failed or the hardware was unreachable,
2 bad command line (checked before any TPU look-up). `--help`, `--version`,
`smoke --help` and every usage error answer before TensorFlow is imported (the
check table, `compat_distribute.smoke.table`, and the presets import none).

Its output is the report alone: TensorFlow's native log lines (oneDNN, CUDA
stubs, cuInit) are held back, and shown only when the run fails, unless
`--verbose` is given or TF_CPP_MIN_LOG_LEVEL is set by the user.
"""

import argparse
import faulthandler
import json
import os
import sys
import threading
import traceback

from compat_distribute import _env
from compat_distribute import _exit
from compat_distribute import _native_log

PROG = "compat-distribute"
DEFAULT_STEPS_PER_RUN = 4
MAX_STEPS_PER_RUN = 10_000
DEFAULT_TIMEOUT_S = 300
VERBOSE_FLAGS = ("--verbose", "-v")
COMMANDS = ("smoke",)
TOP_LEVEL_OPTIONS = ("-h", "--help", "--version")  # build_parser's, before COMMAND

# The targets of this process's runs. Their input iterators are destroyed by
# ending the process, not before: in TensorFlow 2.21 destroying one can wait
# seconds to a minute (see compat_distribute._exit).
_KEPT_UNTIL_EXIT = []


def _version():
    import compat_distribute  # pylint: disable=g-import-not-at-top

    return compat_distribute.__version__


def _setting(name):
    """An argparse type: the parser of the pytest plugin's setting `name`."""
    from compat_distribute.testing.pytest import options  # pylint: disable=g-import-not-at-top

    parse = next(o.parse for o in options.OPTIONS if o.name == name)

    def parse_argument(text):
        try:
            return parse(text)
        except ValueError as e:
            fix = getattr(e, "fix", "")  # the plugin's advice, e.g. "Did you mean --tpu=fake?"
            message = f"{e}; got {text!r}" + (f". {fix}" if fix else "")
            raise argparse.ArgumentTypeError(message) from None

    return parse_argument


def build_parser():
    """The top-level parser: `--version` and the command name; no TensorFlow."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="TF1 distribution code on TF2: tools.",
        epilog=f"Run '{PROG} COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    parser.add_argument(
        "command", choices=COMMANDS, metavar="COMMAND", help="smoke: run the smoke checks"
    )
    return parser


def build_smoke_parser():
    """The `smoke` command's parser (no TensorFlow: the check table and presets import none)."""
    from compat_distribute.smoke import table as table_lib  # pylint: disable=g-import-not-at-top

    table = table_lib.CHECKS  # read here, so a row added to the table is offered
    checks = "\n".join(f"  {c.name:<20} {c.what}" for c in table)
    parser = argparse.ArgumentParser(
        prog=f"{PROG} smoke",
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
    parser.add_argument(
        "--tpu",
        metavar="fake|auto|NAME",
        type=_setting("tpu"),
        default="fake",
        help="'fake' (default): the fake TPU on virtual CPU devices; 'auto': a TPU "
        "configured here, else the local GPUs, else the fake; NAME: that TPU "
        "(a TPUClusterResolver name, a grpc:// address or 'local')",
    )
    parser.add_argument(
        "--topology",
        choices=table_lib.topologies(),
        default=None,
        help=f"the fake TPU's topology: {', '.join(table_lib.topologies())} "
        f"(default {table_lib.topologies_lib.DEFAULT_TOPOLOGY})",
    )
    parser.add_argument(
        "--hosts",
        type=_setting("fake_tpu_hosts"),
        default=None,
        metavar="N",
        help="the fake TPU's hosts: 1 puts every core of a pod topology (e.g. v3-32) "
        "in this process; the topology's own count (v3-32: 4, the default) runs a "
        "host process each",
    )
    parser.add_argument(
        "--steps-per-run",
        type=_env.argument_type(_env.Count(MAX_STEPS_PER_RUN)),
        default=DEFAULT_STEPS_PER_RUN,
        metavar="N",
        help=f"the strategy's steps_per_run: steps per on-device loop, 1 to "
        f"{MAX_STEPS_PER_RUN} (default {DEFAULT_STEPS_PER_RUN})",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument(
        "--timeout",
        type=_env.argument_type(_env.Number(_env.MAX_SECONDS, "a number of seconds")),
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up (and dump stacks) after this long (default {DEFAULT_TIMEOUT_S})",
    )
    parser.add_argument(
        "--inject-failure",
        choices=[c.name for c in table],
        metavar="CHECK",
        help="fail the named check after it ran, to try the failure path "
        "(one of the checks above)",
    )
    parser.add_argument(
        *VERBOSE_FLAGS,
        dest="verbose",
        action="store_true",
        help="let TensorFlow's native log lines through to stderr",
    )
    return parser


def main(argv=None):
    """Parses `argv` (default sys.argv[1:]) and runs the command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # The first word that is not an option is the command; what follows is its own.
    split = next((i for i, word in enumerate(argv) if not word.startswith("-")), len(argv))
    parser = build_parser()
    unknown = [w for w in argv[:split] if w not in TOP_LEVEL_OPTIONS]
    if unknown:  # argparse would ask for COMMAND first, not naming the flag
        parser.error(
            f"unrecognized arguments: {' '.join(unknown)}. Before COMMAND come only "
            f"{', '.join(TOP_LEVEL_OPTIONS)}; a command's options follow it (see "
            f"'{PROG} smoke --help')."
        )
    parser.parse_args(argv[: split + 1])
    smoke_parser = build_smoke_parser()
    args = smoke_parser.parse_args(argv[split + 1 :])
    _check_fake_options(args, smoke_parser)
    try:  # Before TensorFlow: a bad value is one line, exit 2.
        _env.check_all(os.environ)
    except _env.SettingError as e:
        _say(f"{PROG} smoke: error: {e}", sys.stderr)
        return 2
    return _smoke(args)


def _check_fake_options(args, parser):
    """Refuses --topology and --hosts for a real TPU, and hosts the topology lacks."""
    from compat_distribute.testing._fake_tpu import topologies  # pylint: disable=g-import-not-at-top

    for option, value in (("--topology", args.topology), ("--hosts", args.hosts)):
        if value is not None and args.tpu not in ("fake", "auto"):
            parser.error(
                f"argument {option}: applies to the fake TPU only; got {option} "
                f"{value} with --tpu {args.tpu}. Drop {option}."
            )
    try:  # The fake's own check, in its words.
        topologies.host_count(args.topology, args.hosts)
    except ValueError as e:
        shown = topologies.preset_name(args.topology)
        parser.error(f"argument --hosts: with --topology {shown}: {e} Leave --hosts "
                     f"out (None) for the topology's own count.")


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
        # TensorFlow is stuck: its atexit handlers could block too, so skip them.
        os._exit(1)  # pylint: disable=protected-access

    def start(self):
        self._timer.start()
        return self

    def stop(self):
        self._timer.cancel()


def _smoke(args):
    watchdog = _Watchdog(args.timeout).start()
    try:
        return _run_smoke(args, watchdog)
    finally:
        watchdog.stop()


def _run_smoke(args, watchdog):
    # These import TensorFlow: only once the command line is good.
    # pylint: disable=g-import-not-at-top
    from compat_distribute.smoke import progress
    from compat_distribute.smoke import report as report_lib
    from compat_distribute.smoke import run
    from compat_distribute.smoke import targets
    from compat_distribute.testing import _backend

    watchdog.stage = "setting up the hardware"
    try:
        backend = _backend.choose_backend(
            args.tpu, topology=args.topology, hosts=args.hosts, gpus=True, timeout=args.timeout
        )
    except _backend.TPUUnreachableError as e:
        if args.json:
            wanted = "fake TPU" if args.tpu == "fake" else f"TPU {args.tpu}"
            _say(
                json.dumps(
                    {"ok": False, "device": wanted, "replicas": 0, "checks": [], "error": str(e)}
                )
            )
        _say(f"{PROG} smoke: error: {e}", sys.stderr)
        return 1
    target = targets.target(backend, args.steps_per_run)
    _KEPT_UNTIL_EXIT.append(target)

    if not args.json:
        _say(report_lib.format_header(target))

    def on_result(result):
        if not args.json:
            _say(report_lib.format_result(result))

    def on_start(name):
        watchdog.stage = f"check {name}"

    report = run.run_checks(
        target,
        inject_failure=args.inject_failure,
        progress=progress.Progress(sys.stderr),
        on_start=on_start,
        on_result=on_result,
    )
    if args.json:
        _say(json.dumps(report.as_dict()))
        for failure in report.failures:
            _say(f"FAILED {failure.name}: {failure.detail}", sys.stderr)
    else:
        _say(report_lib.format_footer(report))
    return 0 if report.ok else 1


def entry(argv=None):
    """The console script: `main()` with TensorFlow's native log held back, then exit.

    The process ends through `compat_distribute._exit.end_process` (TensorFlow
    2.21 can block for minutes at interpreter exit; the report is out by then).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    wanted = any(flag in argv for flag in VERBOSE_FLAGS) or "TF_CPP_MIN_LOG_LEVEL" in os.environ
    native_log = None if wanted else _native_log.hold_back()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: --help, --version, usage errors
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt:
        _say(f"{PROG}: interrupted", sys.stderr)
        code = 130
    except Exception:  # pylint: disable=broad-except
        traceback.print_exc()  # a bug in this command: its traceback, then the usual exit
        code = 1
    if native_log is not None and code not in (0, 2):
        native_log.show(sys.stderr, why="the run failed")
    _exit.end_process(code)


if __name__ == "__main__":
    entry()
