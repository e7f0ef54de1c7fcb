"""The harness's options: one table (`OPTIONS`), read from four places.

command line > environment variable > ini key > default, stated once here.
Imports neither pytest nor TensorFlow.
"""

import dataclasses
import difflib
import math
import os
from typing import Any, Callable

from compat_distribute.testing import devices

TPU_KEYWORDS = ("fake", "auto")
DEFAULT_SOURCE = "the default"
XLA_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class SettingError(ValueError):
    """A setting's value is invalid; the message names the option and its source."""


class _Invalid(ValueError):
    """A parser's complaint: what is expected, and what to do (said after the value)."""

    def __init__(self, expected, fix=""):
        super().__init__(expected)
        self.fix = fix


def _count(raw, most):
    """The positive int `raw` says; None when it is above `most`."""
    digits = raw.strip().lstrip("0") if isinstance(raw, str) else ""
    if not (digits.isascii() and digits.isdigit()):
        raise _Invalid("expected a positive integer")
    # Count the digits first: a huge count is refused without converting it.
    if len(digits) > len(str(most)) or int(digits) > most:
        return None
    return int(digits)


def _device_count(raw):
    count = _count(raw, devices.MAX_DEVICES)
    if count is None:
        raise _Invalid(
            f"expected at most {devices.MAX_DEVICES} devices (the most one process gets, "
            f"compat_distribute.testing.devices.MAX_DEVICES)",
            "Ask for what the tests need: the fake TPU's core count, or the n of the "
            "largest multi_device(n).",
        )
    return count


def _host_count(raw):
    # Bounded by the largest preset; which counts fit is checked against the
    # topology once every setting is read (`_check_hosts`).
    from compat_distribute.testing._fake_tpu import PRESETS  # numpy, not TensorFlow

    most = max(preset.hosts for preset in PRESETS.values())
    count = _count(raw, most)
    if count is None:
        raise _Invalid(
            f"expected at most {most} hosts (the most of any fake TPU preset)",
            "A fake TPU runs on 1 host (every core in one process) or on its "
            "preset's own hosts (v3-32: 4).",
        )
    return count


def _tpu(raw):
    if raw in TPU_KEYWORDS:
        return raw
    close = difflib.get_close_matches(raw.lower(), TPU_KEYWORDS, n=1, cutoff=0.75)
    if close:
        raise _Invalid(
            "expected 'fake', 'auto' or the name of a TPU",
            f"Did you mean --tpu={close[0]}? For a TPU really named {raw!r}, set "
            f"TPU_NAME={raw} and pass --tpu=auto.",
        )
    if raw and raw.strip() == raw and not any(c.isspace() for c in raw):
        return raw  # A TPU name or grpc:// address.
    raise ValueError("expected 'fake', 'auto' or the name of a TPU (no spaces)")


def _topology(raw):
    from compat_distribute.testing import _fake_tpu as fake_tpu

    if raw in fake_tpu.PRESETS:  # pods included
        return raw
    raise ValueError(f"expected one of {', '.join(map(repr, sorted(fake_tpu.PRESETS)))}")


def _bool(raw):
    if raw is True or raw is False:
        return raw
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError(f"expected one of {', '.join(_TRUE + _FALSE)}")


def _xla_flags_device_count(env):
    """(raw N, or None when the flag is absent; its source) from XLA_FLAGS."""
    found = None
    for flag in (env.get("XLA_FLAGS") or "").split():
        name, _, value = flag.partition("=")
        if name in (XLA_DEVICE_COUNT_FLAG, "-" + XLA_DEVICE_COUNT_FLAG.lstrip("-")):
            found = value  # As XLA parses its flags, the last one wins.
    return found, f"{XLA_DEVICE_COUNT_FLAG} in environment variable XLA_FLAGS"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option: its name in each place, its parser, its default and its help."""

    name: str  # ini key, and the attribute of `Settings`
    flag: str  # command-line flag
    env: str  # environment variable
    parse: Callable[[Any], Any]  # raw text (or a switch's bool) -> value; raises ValueError
    default: Any
    help: str
    metavar: str = ""
    off_flag: str = ""  # for a switch: the command-line flag that turns it off
    # A last place to read, after the ini key: env -> (raw value or None, source).
    fallback: Callable[[Any], tuple] | None = None
    # The default worked out from the other settings when read (it may import numpy).
    default_of: Callable[["Settings"], Any] | None = None
    # A check of the value against the other settings, once all are read.
    check: Callable[["Settings"], None] | None = None

    @property
    def is_switch(self):
        """Whether this is a command-line switch that takes no value."""
        return bool(self.off_flag)

    @property
    def dest(self):
        """Its attribute on pytest's `config.option`."""
        return f"compat_distribute_{self.name}"


def _default_topology(settings):
    del settings  # The fake's own default, whatever else is set.
    from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY

    return DEFAULT_TOPOLOGY


def _own_host_count(settings):
    from compat_distribute.testing._fake_tpu import topologies

    return topologies.host_count(settings.fake_tpu_topology, None)


def _check_hosts(settings):
    """Raises `SettingError` when a given host count does not fit the topology."""
    if settings.given_hosts is None:
        return
    from compat_distribute.testing._fake_tpu import topologies  # numpy, not TensorFlow

    try:  # The fake's own check and message.
        topologies.host_count(settings.fake_tpu_topology, settings.given_hosts)
    except ValueError as e:
        raise SettingError(
            f"{settings.shown('fake_tpu_hosts')} does not fit --fake-tpu-topology="
            f"{settings.fake_tpu_topology} (from {settings.source('fake_tpu_topology')}): "
            f"{e} Leave --fake-tpu-hosts unset (None) for the topology's own count."
        ) from None


OPTIONS = (
    Option(
        name="tf_devices",
        flag="--tf-devices",
        env="COMPAT_DISTRIBUTE_TF_DEVICES",
        parse=_device_count,
        default=None,
        help=f"split the CPU into N virtual TensorFlow devices at start-up, N at most "
        f"{devices.MAX_DEVICES} (default: {XLA_DEVICE_COUNT_FLAG}=N from XLA_FLAGS if set, "
        f"else as many as the collected tests need: the fake TPU's cores when a test uses "
        f"its fixtures, the largest multi_device(n))",
        metavar="N",
        fallback=_xla_flags_device_count,
    ),
    Option(
        name="tpu",
        flag="--tpu",
        env="COMPAT_DISTRIBUTE_TPU",
        parse=_tpu,
        default="fake",
        help="TPU behind the tpu_strategy fixture: 'fake' (default), 'auto' "
        "(a reachable TPU, else the fake) or a TPU name (must be reachable, "
        "else the session fails)",
        metavar="fake|auto|NAME",
    ),
    Option(
        name="fake_tpu_topology",
        flag="--fake-tpu-topology",
        env="COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY",
        parse=_topology,
        default=None,
        default_of=_default_topology,
        help="topology of the fake TPU (default: the fake's DEFAULT_TOPOLOGY)",
        metavar="TOPOLOGY",
    ),
    Option(
        name="fake_tpu_hosts",
        flag="--fake-tpu-hosts",
        env="COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS",
        parse=_host_count,
        default=None,
        default_of=_own_host_count,
        check=_check_hosts,
        help="host processes of the fake TPU: 1 puts every core of a pod preset (e.g. "
        "v3-32) in the test process, as virtual devices; a pod preset's own count "
        "(v3-32: 4) runs a host process each (default: the topology's own count)",
        metavar="N",
    ),
    Option(
        name="fake_tpu_strict",
        flag="--fake-tpu-strict",
        env="COMPAT_DISTRIBUTE_FAKE_TPU_STRICT",
        parse=_bool,
        default=False,
        help="make the fake TPU reject ops a real TPU cannot compile (default: off)",
        off_flag="--no-fake-tpu-strict",
    ),
)


def _option(name):
    for option in OPTIONS:
        if option.name == name:
            return option
    raise AttributeError(f"no option {name!r}; the options are {[o.name for o in OPTIONS]}")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What `read` found: `settings.<option name>` is the option's value, `source(name)` its place."""

    given: tuple  # ((name, value), ...): the options set somewhere, not left to their default
    sources: tuple  # ((name, source), ...)

    def __getattr__(self, name):
        if name.startswith("_") or name in ("given", "sources"):
            raise AttributeError(name)  # not an option (and no recursion while unpickling)
        option = _option(name)
        given = dict(self.given)
        if name in given:
            return given[name]
        return option.default if option.default_of is None else option.default_of(self)

    def given_value(self, name):
        """The value set for option `name`, or None when it is left to its default."""
        _option(name)
        return dict(self.given).get(name)

    @property
    def given_hosts(self):
        """The host count set, None for the topology's own (the backend chooser reads it)."""
        return self.given_value("fake_tpu_hosts")

    def source(self, name):
        return dict(self.sources).get(name, DEFAULT_SOURCE)

    def shown(self, name):
        """E.g. "--tf-devices=4 (from the command line)"."""
        return f"{_option(name).flag}={getattr(self, name)} (from {self.source(name)})"

    @property
    def any_given(self):
        """Whether any option came from somewhere other than its default."""
        return bool(self.given)


def read(cli=None, env=None, ini=None, ini_path=None):
    """Reads `Settings` from the places, in the order of precedence.

    `cli` and `ini` map option names to raw values (None or "" when not set),
    `env` is a mapping such as `os.environ`. Raises `SettingError` naming the
    option, the bad value and where it came from.
    """
    cli, env, ini = cli or {}, env or {}, ini or {}
    given, sources = [], []
    for option in OPTIONS:
        places = [
            (cli.get(option.name), "the command line"),
            (env.get(option.env), f"environment variable {option.env}"),
            (
                ini.get(option.name),
                f"ini key {option.name}" + (f" in {ini_path}" if ini_path else ""),
            ),
        ]
        if option.fallback is not None:
            places.append(option.fallback(env))
        for raw, source in places:
            if raw is None or raw == "":
                continue
            try:
                value = option.parse(raw)
            except ValueError as e:
                fix = f". {e.fix}" if isinstance(e, _Invalid) and e.fix else ""
                raise SettingError(
                    f"{option.flag}: {e}, got {raw!r} (from {source}){fix}"
                ) from None
            given.append((option.name, value))
            sources.append((option.name, source))
            break
    settings = Settings(given=tuple(given), sources=tuple(sources))
    for option in OPTIONS:
        if option.check is not None:
            option.check(settings)
    return settings


def from_environment(environ):
    """Settings for code outside pytest: environment variables, then defaults."""
    return read(env=environ)


def add_to_parser(parser):
    """Adds each option to pytest's command line (and its off switch) and ini keys."""
    group = parser.getgroup(
        "compat_distribute", "TensorFlow devices, fake TPU and local clusters (compat_distribute)"
    )
    for option in OPTIONS:
        where = f" [env {option.env}, ini {option.name}]"
        if option.is_switch:
            group.addoption(
                option.flag, action="store_true", default=None, dest=option.dest,
                help=option.help + where,
            )
            group.addoption(
                option.off_flag, action="store_false", default=None, dest=option.dest,
                help=f"turn {option.flag} off, over the environment and ini",
            )
        else:
            group.addoption(
                option.flag, action="store", default=None, dest=option.dest,
                metavar=option.metavar, help=option.help + where,
            )
        parser.addini(option.name, option.help, default="")


def from_config(config, parsed=None):
    """Reads `Settings` for a pytest session: its command line, the environment, its ini file.

    `parsed` holds the command line's options: `config.option` by default;
    `config.known_args_namespace` before pytest has parsed all of it.
    """
    parsed = config.option if parsed is None else parsed
    return read(
        cli={o.name: getattr(parsed, o.dest, None) for o in OPTIONS},
        env=os.environ,
        ini={o.name: config.getini(o.name) for o in OPTIONS},
        ini_path=config.inipath,
    )


def check_devices_hold_fake(settings, fake_cores):
    """Raises `SettingError` when a device count is below the fake TPU's cores.

    The fake would create its cores anyway, so the count said in the header
    and the devices the tests get would disagree.
    """
    if settings.tf_devices is None or settings.tf_devices >= fake_cores:
        return
    from compat_distribute.testing._fake_tpu import PRESETS  # numpy, not TensorFlow
    from compat_distribute.testing._fake_tpu import topologies

    fitting = [name for name, mesh in topologies.one_host_meshes().items() if math.prod(mesh) <= settings.tf_devices]
    instead = (
        f", or a topology of at most {settings.tf_devices} cores: "
        + " or ".join(f"--fake-tpu-topology={name}" for name in fitting)
        if fitting
        else ""
    )
    on_one_host = ""
    own_hosts = PRESETS[settings.fake_tpu_topology].hosts
    if own_hosts > 1:  # A pod on one host; its own hosts would hold the cores instead.
        on_one_host = f" with {settings.shown('fake_tpu_hosts')}"
        instead += f", or --fake-tpu-hosts={own_hosts} (its cores on host processes)"
    raise SettingError(
        f"{settings.shown('tf_devices')} is fewer devices than the {fake_cores} cores of "
        f"the fake TPU's topology {settings.fake_tpu_topology} (from "
        f"{settings.source('fake_tpu_topology')}){on_one_host}, which needs one device per "
        f"core. Pass --tf-devices={fake_cores} or more{instead}."
    )
