"""The harness settings: one table of options, read from four places.

Each setting can come from the pytest command line, an environment variable,
an ini key (`[tool:pytest]` in setup.cfg, `[pytest]` in pytest.ini or tox.ini,
`[tool.pytest.ini_options]` in pyproject.toml) or its default. Precedence:

    command line > environment variable > ini key > default

An empty environment variable or ini value counts as not set. The pytest
plugin reads all four places; `compat_distribute.testing.TestCase` (absltest)
reads the environment and the defaults. Nothing here imports TensorFlow
unless a topology is given (checked against the fake TPU's presets).
"""

import dataclasses
from typing import Any, Callable

from compat_distribute.testing._fake_tpu.topologies import DEFAULT_TOPOLOGY

TPU_KEYWORDS = ("fake", "auto")
DEFAULT_SOURCE = "the default"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class SettingError(ValueError):
    """A setting's value is invalid; the message names the option and its source."""


def _positive_int(raw):
    if isinstance(raw, str) and raw.strip().isdigit() and int(raw) >= 1:
        return int(raw)
    raise ValueError("expected a positive integer")


def _tpu(raw):
    if raw in TPU_KEYWORDS:
        return raw
    if raw and raw.strip() == raw and not any(c.isspace() for c in raw):
        return raw  # A TPU name or grpc:// address.
    raise ValueError("expected 'fake', 'auto' or the name of a TPU (no spaces)")


def _topology(raw):
    from compat_distribute.testing import _fake_tpu as fake_tpu

    if raw in fake_tpu.TOPOLOGIES:
        return raw
    raise ValueError(f"expected one of {', '.join(map(repr, sorted(fake_tpu.TOPOLOGIES)))}")


def _bool(raw):
    if raw is True or raw is False:
        return raw
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError(f"expected one of {', '.join(_TRUE + _FALSE)}")


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
    is_flag: bool = False  # a command-line switch that takes no value


OPTIONS = (
    Option(
        name="tf_devices",
        flag="--tf-devices",
        env="COMPAT_DISTRIBUTE_TF_DEVICES",
        parse=_positive_int,
        default=None,
        help="split the CPU into N virtual TensorFlow devices at start-up "
        "(default: leave TensorFlow alone)",
        metavar="N",
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
        default=DEFAULT_TOPOLOGY,
        help=f"topology of the fake TPU (default: {DEFAULT_TOPOLOGY})",
        metavar="TOPOLOGY",
    ),
    Option(
        name="fake_tpu_strict",
        flag="--fake-tpu-strict",
        env="COMPAT_DISTRIBUTE_FAKE_TPU_STRICT",
        parse=_bool,
        default=False,
        help="make the fake TPU reject ops a real TPU cannot compile",
        is_flag=True,
    ),
)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Resolved settings, with where each value came from."""

    tf_devices: int | None = None
    tpu: str = "fake"
    fake_tpu_topology: str = DEFAULT_TOPOLOGY
    fake_tpu_strict: bool = False
    sources: tuple = ()  # ((name, source), ...)

    def source(self, name):
        return dict(self.sources).get(name, DEFAULT_SOURCE)

    @property
    def any_given(self):
        """Whether any setting came from somewhere other than its default."""
        return any(source != DEFAULT_SOURCE for _, source in self.sources)


def resolve(cli=None, env=None, ini=None, ini_path=None):
    """Returns `Settings` from the three places, highest precedence first.

    `cli` and `ini` map option names to raw values (None or "" when not set),
    `env` is a mapping such as `os.environ`. Raises `SettingError` naming the
    option, the bad value and where it came from.
    """
    cli, env, ini = cli or {}, env or {}, ini or {}
    values, sources = {}, []
    for option in OPTIONS:
        places = (
            (cli.get(option.name), "the command line"),
            (env.get(option.env), f"environment variable {option.env}"),
            (
                ini.get(option.name),
                f"ini key {option.name}" + (f" in {ini_path}" if ini_path else ""),
            ),
        )
        for raw, source in places:
            if raw is None or raw == "":
                continue
            try:
                values[option.name] = option.parse(raw)
            except ValueError as e:
                raise SettingError(f"{option.flag}: {e}, got {raw!r} (from {source})") from None
            sources.append((option.name, source))
            break
        else:
            values[option.name] = option.default
            sources.append((option.name, DEFAULT_SOURCE))
    return Settings(**values, sources=tuple(sources))


def from_environment(environ):
    """Settings for code outside pytest: environment variables, then defaults."""
    return resolve(env=environ)
