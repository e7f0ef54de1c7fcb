"""The harness settings: one table of options, read from four places.

Each setting can come from the pytest command line, an environment variable,
an ini key (`[tool:pytest]` in setup.cfg, `[pytest]` in pytest.ini or tox.ini,
`[tool.pytest.ini_options]` in pyproject.toml) or its default. Precedence:

    command line > environment variable > ini key > default

An empty environment variable or ini value counts as not set. The device
count has one more place, between the ini key and the default: JAX's
`XLA_FLAGS=--xla_force_host_platform_device_count=N` (TensorFlow itself ignores
it). The pytest plugin reads all the places; `compat_distribute.testing.TestCase`
(absltest) reads the environment and the defaults. A host count, once every
setting is read, must be one the topology has (the fake's own rule: 1, or a pod
preset's own count). Nothing here imports TensorFlow (the fake TPU's presets,
read for a topology or a host count, import numpy).
"""

import dataclasses
import difflib
import math
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
    """One setting: its names in each place, its parser and its default."""

    name: str  # ini key and attribute name
    flag: str
    env: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    metavar: str = ""
    off_flag: str = ""  # for a switch: the command-line flag that turns it off
    # A last place to read, after the ini key: env -> (raw value or None, source).
    fallback: Callable[[Any], tuple] | None = None

    @property
    def is_flag(self):
        """Whether this is a command-line switch that takes no value."""
        return bool(self.off_flag)


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
        default=None,  # The fake's own default, read from it when needed.
        help="topology of the fake TPU (default: the fake's DEFAULT_TOPOLOGY)",
        metavar="TOPOLOGY",
    ),
    Option(
        name="fake_tpu_hosts",
        flag="--fake-tpu-hosts",
        env="COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS",
        parse=_host_count,
        default=None,  # The topology's own host count.
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


@dataclasses.dataclass(frozen=True)
class Settings:
    """Settings as `read` found them (defaults: `OPTIONS`), with where each came from."""

    tf_devices: int | None
    tpu: str
    given_topology: str | None  # None: the fake's DEFAULT_TOPOLOGY
    given_hosts: int | None  # None: the topology's own host count
    fake_tpu_strict: bool
    sources: tuple  # ((name, source), ...)

    @property
    def fake_tpu_topology(self):
        """The fake TPU's topology name (the fake's default is read on first use: it imports numpy)."""
        if self.given_topology is not None:
            return self.given_topology
        from compat_distribute.testing._fake_tpu import DEFAULT_TOPOLOGY

        return DEFAULT_TOPOLOGY

    @property
    def fake_tpu_hosts(self):
        """The fake TPU's hosts: the given count, else its topology's own."""
        if self.given_hosts is not None:
            return self.given_hosts  # `read` checked it fits (the message shows it)
        from compat_distribute.testing._fake_tpu import topologies

        return topologies.host_count(self.fake_tpu_topology, None)

    def source(self, name):
        return dict(self.sources).get(name, DEFAULT_SOURCE)

    def shown(self, name):
        """E.g. "--tf-devices=4 (from the command line)"."""
        option = next(o for o in OPTIONS if o.name == name)
        return f"{option.flag}={getattr(self, name)} (from {self.source(name)})"

    @property
    def any_given(self):
        """Whether any setting came from somewhere other than its default."""
        return any(source != DEFAULT_SOURCE for _, source in self.sources)


def read(cli=None, env=None, ini=None, ini_path=None):
    """Reads `Settings` from the places, highest precedence first.

    `cli` and `ini` map option names to raw values (None or "" when not set),
    `env` is a mapping such as `os.environ`. Raises `SettingError` naming the
    option, the bad value and where it came from.
    """
    cli, env, ini = cli or {}, env or {}, ini or {}
    values, sources = {}, []
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
                values[option.name] = option.parse(raw)
            except ValueError as e:
                fix = f". {e.fix}" if isinstance(e, _Invalid) and e.fix else ""
                raise SettingError(
                    f"{option.flag}: {e}, got {raw!r} (from {source}){fix}"
                ) from None
            sources.append((option.name, source))
            break
        else:
            values[option.name] = option.default
            sources.append((option.name, DEFAULT_SOURCE))
    values["given_topology"] = values.pop("fake_tpu_topology")
    values["given_hosts"] = values.pop("fake_tpu_hosts")
    settings = Settings(**values, sources=tuple(sources))
    _check_hosts(settings)
    return settings


def _check_hosts(settings):
    """Raises `SettingError` when a given host count does not fit the topology."""
    if settings.given_hosts is None:
        return
    from compat_distribute.testing._fake_tpu import topologies  # numpy, not TensorFlow

    try:  # The fake's own check, in its words.
        topologies.host_count(settings.fake_tpu_topology, settings.given_hosts)
    except ValueError as e:
        raise SettingError(
            f"{settings.shown('fake_tpu_hosts')} does not fit --fake-tpu-topology="
            f"{settings.fake_tpu_topology} (from {settings.source('fake_tpu_topology')}): "
            f"{e} Leave --fake-tpu-hosts unset (None) for the topology's own count."
        ) from None


def from_environment(environ):
    """Settings for code outside pytest: environment variables, then defaults."""
    return read(env=environ)


def check_devices_hold_fake(settings, fake_cores):
    """Raises `SettingError` when a device count is below the fake TPU's cores.

    The fake would create its cores anyway, so the count said in the header
    and the devices the tests get would disagree.
    """
    if settings.tf_devices is None or settings.tf_devices >= fake_cores:
        return
    from compat_distribute.testing._fake_tpu import PRESETS  # numpy, not TensorFlow
    from compat_distribute.testing._fake_tpu import TOPOLOGIES

    fitting = [name for name, mesh in TOPOLOGIES.items() if math.prod(mesh) <= settings.tf_devices]
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
