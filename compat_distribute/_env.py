"""Every `COMPAT_DISTRIBUTE_*` environment variable, as a row, and the parsers they share.

`VARIABLES` is the one list: its name, parser, default, help and docs page.
Every reader goes through `read(name)`; docs/settings.md is generated from
the table (`python tools/readme.py settings`). An empty or blank value counts
as unset. A bad value raises `SettingError`, one line naming the variable, the
value and what is accepted. The pytest plugin's five settings are rows here
too, parsed by the plugin's own parsers (loaded on first use: the core imports
no harness module). Imports no TensorFlow.
"""

import argparse
import dataclasses
import difflib
import os
from typing import Any

from compat_distribute import _lazy

# A day: a longer time limit is a typo, not a slow machine.
MAX_SECONDS = 86_400
_TRUE = ("1", "true", "yes", "on")  # as `Boolean.accepts` says
_FALSE = ("0", "false", "no", "off")


class SettingError(ValueError):
    """A setting's value is invalid; the message names the setting, the value and its source."""


# The shared parsers: each takes the text, returns the value or raises
# ValueError, and says what it accepts in `accepts`.


@dataclasses.dataclass(frozen=True)
class Number:
    """A number > 0 and at most `most`."""

    most: float
    what: str = "a number"

    @property
    def accepts(self):
        return f"{self.what} > 0 and at most {self.most:g}"

    def __call__(self, text):
        try:
            value = float(text)
        except (TypeError, ValueError):
            value = float("nan")
        if not 0 < value <= self.most:  # Also refuses nan.
            raise ValueError(self.accepts)
        return value


def count(text, most):
    """The whole number >= 1 that `text` says, or None when it is above `most`.

    Raises ValueError for anything but digits. A huge count is refused by its
    length, without converting it.
    """
    digits = text.strip().lstrip("0") if isinstance(text, str) else ""
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError("a positive integer")
    if len(digits) > len(str(most)) or int(digits) > most:
        return None
    return int(digits)


@dataclasses.dataclass(frozen=True)
class Count:
    """A whole number from 1 to `most`."""

    most: int

    @property
    def accepts(self):
        return f"a whole number from 1 to {self.most}"

    def __call__(self, text):
        try:
            value = count(text, self.most)
        except ValueError:
            value = None
        if value is None:
            raise ValueError(self.accepts)
        return value


def argument_type(parse):
    """Shared parser `parse` as an argparse type: a refused value is a usage
    error naming what it accepts and what it got."""

    def parse_argument(text):
        try:
            return parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {parse.accepts}; got {text!r}") from None

    return parse_argument


@dataclasses.dataclass(frozen=True)
class Choice:
    """One of `values`."""

    values: tuple

    @property
    def accepts(self):
        return "one of " + ", ".join(map(repr, self.values))

    def __call__(self, text):
        if text not in self.values:
            raise ValueError(self.accepts)
        return text


@dataclasses.dataclass(frozen=True)
class Boolean:
    """On or off; a command-line switch gives True or False itself."""

    accepts = "1/0, true/false, yes/no or on/off"

    def __call__(self, text):
        if text is True or text is False:
            return text
        if isinstance(text, str) and text.lower() in _TRUE:
            return True
        if isinstance(text, str) and text.lower() in _FALSE:
            return False
        raise ValueError(self.accepts)


@dataclasses.dataclass(frozen=True)
class PluginOption:
    """The parser of the pytest plugin's option `option`, loaded on first use."""

    option: str
    accepts: str

    def __call__(self, text):
        return _lazy.load("compat_distribute.testing.pytest.options:parse")(self.option, text)


@dataclasses.dataclass(frozen=True)
class Variable:
    """One environment variable."""

    name: str
    parse: Any  # text -> value, raising ValueError; `parse.accepts` says what it takes
    default: Any  # the value when unset
    shown_default: str  # the default as the docs say it
    help: str  # what it does, as a verb phrase ("multiplies ..."), no final stop
    page: str  # the docs page that explains it
    option: str = ""  # the pytest plugin's option it sets, if any


VARIABLES = (
    Variable(
        "COMPAT_DISTRIBUTE_TF_DEVICES",
        PluginOption("tf_devices", "a whole number from 1 to 256"),
        None,
        "as many as the tests need",
        "sets the pytest plugin's --tf-devices: N virtual TensorFlow devices at start-up",
        "plugin.md",
        option="tf_devices",
    ),
    Variable(
        "COMPAT_DISTRIBUTE_TPU",
        PluginOption("tpu", "'fake', 'auto' or the name of a TPU"),
        "fake",
        "fake",
        "sets the pytest plugin's and TestCase's --tpu: the TPU behind tpu_strategy",
        "plugin.md",
        option="tpu",
    ),
    Variable(
        "COMPAT_DISTRIBUTE_FAKE_TPU_TOPOLOGY",
        PluginOption("fake_tpu_topology", "the name of a preset (PRESETS)"),
        None,
        "v3-8, the fake's DEFAULT_TOPOLOGY",
        "sets the pytest plugin's and TestCase's --fake-tpu-topology: the fake TPU's slice",
        "plugin.md",
        option="fake_tpu_topology",
    ),
    Variable(
        "COMPAT_DISTRIBUTE_FAKE_TPU_HOSTS",
        PluginOption("fake_tpu_hosts", "1, or a pod preset's own host count"),
        None,
        "the topology's own host count",
        "sets the pytest plugin's and TestCase's --fake-tpu-hosts: the fake TPU's host processes",
        "plugin.md",
        option="fake_tpu_hosts",
    ),
    Variable(
        "COMPAT_DISTRIBUTE_FAKE_TPU_STRICT",
        Boolean(),
        False,
        "0",
        "sets the pytest plugin's and TestCase's --fake-tpu-strict: the fake TPU rejects ops "
        "a real TPU cannot compile",
        "plugin.md",
        option="fake_tpu_strict",
    ),
    Variable(
        "COMPAT_DISTRIBUTE_FAKE_TPU_TRACE",
        Choice(("once", "per_replica")),
        "once",
        "once",
        "chooses how a fake TPU strategy built from now on traces a step: once for all its "
        "replicas, as a TPU compiles it, or once per replica, as MirroredStrategy does",
        "fake-tpu.md",
    ),
    Variable(
        "COMPAT_DISTRIBUTE_POD_NETWORK",
        Choice(("auto", "private", "host")),
        "auto",
        "auto",
        "chooses where a fake TPU pod's host servers listen: on a private network reached "
        "through a relay, on this process's network, or (auto) private where the platform "
        "allows it",
        "pods.md",
    ),
    Variable(
        "COMPAT_DISTRIBUTE_ZYGOTE",
        Boolean(),
        True,
        "1",
        "makes local_cluster and fake TPU pods fork their tasks from one process that "
        "imported TensorFlow (1), or start each task as a fresh process (0)",
        "clusters.md",
    ),
    Variable(
        "COMPAT_DISTRIBUTE_TIMEOUT_SCALE",
        Number(100),
        1.0,
        "1",
        "multiplies every time limit given to a child process (e.g. 3 on a loaded machine)",
        "clusters.md",
    ),
    Variable(
        "COMPAT_DISTRIBUTE_CLUSTER_START_TIMEOUT",
        Number(MAX_SECONDS, "a number of seconds"),
        None,
        "TensorFlow's own wait, an hour",
        "bounds how long MultiWorkerMirroredStrategy() waits for the other tasks of its "
        "cluster; past it the process ends, naming the tasks",
        "clusters.md",
    ),
    Variable(
        "COMPAT_DISTRIBUTE_END_PROCESS",
        Boolean(),
        True,
        "1",
        "makes a pytest session (the pytest command's, or an xdist worker's) that imported "
        "TensorFlow end its process once its report is out, as TensorFlow can block for "
        "minutes at exit (1), or leave the process to Python's own exit (0)",
        "plugin.md",
    ),
)

_BY_NAME = {variable.name: variable for variable in VARIABLES}


def variable(name):
    """The row of variable `name`."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is no row of compat_distribute._env.VARIABLES") from None


def of_option(option):
    """The row of the pytest plugin's option `option`."""
    (found,) = [v for v in VARIABLES if v.option == option]
    return found


def error(row, text, fix=""):
    """The one-line SettingError for `text`, a bad value of `row`."""
    return SettingError(
        f"{row.name} must be {row.parse.accepts}; got {text!r}. It {row.help}. "
        f"{fix + ' ' if fix else ''}Set it so, or unset it for the default ({row.shown_default})."
    )


def read(name, environ=None):
    """The value of variable `name` in `environ` (default `os.environ`); its default when unset.

    Raises `SettingError` naming the variable, the value and what is accepted.
    """
    row = variable(name)
    text = (os.environ if environ is None else environ).get(name, "")
    if not text.strip():
        return row.default
    try:
        return row.parse(text.strip())
    except ValueError as e:
        raise error(row, text, getattr(e, "fix", "")) from None


def check_all(environ=None):
    """Reads every variable set in `environ`, so a bad value fails before any work starts.

    Also refuses a `COMPAT_DISTRIBUTE_*` name that is no row (a typo would
    otherwise be ignored). Raises `SettingError`.
    """
    environ = os.environ if environ is None else environ
    for name in sorted(environ):
        if name.startswith("COMPAT_DISTRIBUTE_") and name not in _BY_NAME:
            close = difflib.get_close_matches(name, _BY_NAME, n=1)
            guess = f" Did you mean {close[0]}?" if close else ""
            raise SettingError(
                f"{name} is not a compat_distribute setting.{guess} The settings are "
                f"{', '.join(_BY_NAME)} (docs/settings.md)."
            )
    for row in VARIABLES:
        read(row.name, environ)


def markdown():
    """docs/settings.md's table of every variable."""
    lines = ["| variable | accepts | default | what it does | more |", "|---|---|---|---|---|"]
    for row in VARIABLES:
        lines.append(
            f"| `{row.name}` | {row.parse.accepts} | {row.shown_default} | "
            f"{row.help[0].upper()}{row.help[1:]} | [{row.page}]({row.page}) |"
        )
    return "\n".join(lines)
