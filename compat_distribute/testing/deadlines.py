"""One factor for every deadline the harness gives a child process.

$COMPAT_DISTRIBUTE_TIMEOUT_SCALE (e.g. 3 on a loaded CI machine) instead of raising
limits one by one.
"""

import math
import os

__all__ = ["ENV_VAR", "MAX_SCALE", "scale", "scaled", "describe"]

ENV_VAR = "COMPAT_DISTRIBUTE_TIMEOUT_SCALE"
# A factor past this is a typo (a deadline of hours), not a slow machine.
MAX_SCALE = 100.0


def scale(environ=None) -> float:
    """The factor in `environ` (default `os.environ`); 1 where unset or blank.

    Raises ValueError naming the variable, the value and what is accepted.
    """
    text = (os.environ if environ is None else environ).get(ENV_VAR, "")
    if not text.strip():
        return 1.0
    try:
        factor = float(text)
    except ValueError:
        factor = math.nan
    if not 0 < factor <= MAX_SCALE:  # Also refuses nan.
        raise ValueError(
            f"{ENV_VAR} must be a number > 0 and at most {MAX_SCALE:g} (it multiplies every "
            f"deadline given to a child process, e.g. 3 on a loaded machine); got {text!r}. "
            f"Set it to such a number, or unset it for 1."
        )
    return factor


def scaled(seconds, environ=None) -> float:
    """`seconds` times the factor."""
    return seconds * scale(environ)


def describe(seconds, environ=None) -> str:
    """`seconds` scaled, for error texts: "6 s", or "18 s (6 s x COMPAT_..._SCALE=3)"."""
    factor = scale(environ)
    if factor == 1:
        return f"{seconds:g} s"
    return f"{seconds * factor:g} s ({seconds:g} s x {ENV_VAR}={factor:g})"
