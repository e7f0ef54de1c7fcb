"""One factor for every deadline the harness gives a child process.

$COMPAT_DISTRIBUTE_TIMEOUT_SCALE (e.g. 3 on a loaded CI machine) instead of raising
limits one by one.
"""

from compat_distribute import _env

__all__ = ["ENV_VAR", "scale", "scaled", "describe"]

ENV_VAR = "COMPAT_DISTRIBUTE_TIMEOUT_SCALE"


def scale(environ=None) -> float:
    """The factor in `environ` (default `os.environ`); 1 where unset or blank.

    Raises `SettingError` (a ValueError) naming the variable, the value and
    what is accepted (its row in `compat_distribute._env`).
    """
    return _env.read(ENV_VAR, environ)


def scaled(seconds, environ=None) -> float:
    """`seconds` times the factor."""
    return seconds * scale(environ)


def describe(seconds, environ=None) -> str:
    """`seconds` scaled, for error texts: "6 s", or "18 s (6 s x COMPAT_..._SCALE=3)"."""
    factor = scale(environ)
    if factor == 1:
        return f"{seconds:g} s"
    return f"{seconds * factor:g} s ({seconds:g} s x {ENV_VAR}={factor:g})"
