"""Every `COMPAT_DISTRIBUTE_*` environment variable checked at once, before TensorFlow.

A bad value or a misspelt name is one line and exit 2, not a late traceback or nothing.
"""

import difflib

PREFIX = "COMPAT_DISTRIBUTE_"
# Named here as their readers' modules import TensorFlow (a test pins them to
# testing._fake_tpu.replicate.ENV and pod.NETWORK_ENV).
_TRACE_ENV = "COMPAT_DISTRIBUTE_FAKE_TPU_TRACE"
_NETWORK_ENV = "COMPAT_DISTRIBUTE_POD_NETWORK"


def _plugin_option(option):
    """A check of one pytest plugin option's variable alone (the smoke command
    has flags of its own, so the options are not checked against each other)."""

    def check(environ):
        raw = environ[option.env]
        if not raw:
            return
        try:
            option.parse(raw)
        except ValueError as e:
            fix = getattr(e, "fix", "") or "Set it to such a value, or unset it."
            raise ValueError(f"{option.env}: {e}, got {raw!r}. {fix}") from None

    return check


def _trace_mode(environ):
    if environ[_TRACE_ENV].strip():
        # Its reader imports TensorFlow: only when the variable is set.
        from compat_distribute.testing._fake_tpu import replicate  # pylint: disable=g-import-not-at-top

        replicate.check_mode(environ[_TRACE_ENV].strip(), f"${_TRACE_ENV}")


def _pod_network(environ):
    from compat_distribute.testing.cluster import netns  # pylint: disable=g-import-not-at-top

    try:
        netns.check(environ[_NETWORK_ENV])
    except ValueError as e:
        raise ValueError(f"${_NETWORK_ENV}: {e}") from None



def checks():
    """{variable: check(environ)}, one for every variable the package reads."""
    # pylint: disable=g-import-not-at-top
    from compat_distribute import _cluster_wait
    from compat_distribute.testing import deadlines
    from compat_distribute.testing.cluster import launcher
    from compat_distribute.testing.pytest import options

    table = {
        deadlines.ENV_VAR: deadlines.scale,
        _cluster_wait.DEADLINE_ENV: _cluster_wait.deadline,
        launcher.ZYGOTE_ENV_VAR: launcher.zygote_wanted,
        _NETWORK_ENV: _pod_network,
        _TRACE_ENV: _trace_mode,
    }
    table.update({option.env: _plugin_option(option) for option in options.OPTIONS})
    return table


def check_all(environ):
    """Raises ValueError for the first `COMPAT_DISTRIBUTE_*` variable of `environ`
    that no reader knows or whose value its reader refuses; the message names the
    variable, its value and the fix."""
    table = checks()
    for name in sorted(n for n in environ if n.startswith(PREFIX)):
        if name not in table:
            close = difflib.get_close_matches(name, table, n=1)
            guess = f"Did you mean {close[0]}? " if close else ""
            raise ValueError(
                f"{name}={environ[name]!r} is not a compat_distribute setting. {guess}The "
                f"settings are {', '.join(sorted(table))}. Correct the name, or unset it."
            )
        table[name](environ)
