"""The plugin's markers (`tpu`, `multi_device(n)`, `multi_worker(n, has_chief=False, ps=0,
timeout=...)`), and their checks."""

import pytest

from compat_distribute import _env
from compat_distribute.testing import devices

LINES = (
    "tpu: needs a real TPU; skipped when the TPU is the fake (compat_distribute)",
    "multi_device(n): needs at least n replicas; skipped with fewer (compat_distribute)",
    "multi_worker(n, has_chief=False, ps=0, timeout=...): the test's local_cluster fixture is a "
    "cluster of n worker processes (2 when n is left out), with a chief and ps parameter-server "
    "tasks when asked, whose runs fail after timeout seconds (local_cluster's default when left "
    "out) (compat_distribute)",
)
# The keywords of multi_worker besides n, and what each accepts.
CLUSTER_KEYWORDS = {
    "has_chief": "True or False",
    "ps": "an int >= 0",
    "timeout": f"a number of seconds > 0, at most {_env.MAX_SECONDS}",
}
# The shape's keywords a marker leaves out (a timeout left out is local_cluster's own).
_SHAPE_DEFAULTS = {"has_chief": False, "ps": 0}
# What a keyword's example value is, in the error that refuses a bad one.
_EXAMPLES = {"has_chief": "True", "ps": "1", "timeout": "30"}
# The workers of the local_cluster fixture when multi_worker leaves n out.
DEFAULT_WORKERS = 2


def count_problem(item, name):
    """(n, problem) of @pytest.mark.<name>(n): n is None when left out or bad,
    problem None or what is wrong (a multi_device n is at most MAX_DEVICES)."""
    marker = item.get_closest_marker(name)
    if marker is None or not (marker.args or marker.kwargs):
        return None, None
    keywords = set(CLUSTER_KEYWORDS) if name == "multi_worker" else set()
    counts = len(marker.args) + len(set(marker.kwargs) - keywords)
    if counts > 1 or set(marker.kwargs) - keywords - {"n"}:
        given = [repr(a) for a in marker.args] + [f"{k}={v!r}" for k, v in marker.kwargs.items()]
        takes = "one count, n"
        if keywords:
            plural = "s" if len(keywords) > 1 else ""
            *first, last = sorted(keywords)
            takes += f", and the keyword{plural} {', '.join(first)}{' and ' if first else ''}{last}"
        return None, (
            f"@pytest.mark.{name}(n) takes {takes}; got {name}({', '.join(given)}) "
            f"in {item.nodeid}. Write e.g. @pytest.mark.{name}(2)."
        )
    if counts == 0:
        return None, None
    n = marker.kwargs.get("n", marker.args[0] if marker.args else None)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return None, (
            f"@pytest.mark.{name}(n): n must be a positive int; got {n!r} in "
            f"{item.nodeid}. Write e.g. @pytest.mark.{name}(2)."
        )
    if name == "multi_device":
        try:
            devices.check_count(f"@pytest.mark.multi_device(n) in {item.nodeid}: n", n)
        except ValueError as e:
            return None, str(e)
    return n, None


def tpu_problem(item):
    """What is wrong with the item's @pytest.mark.tpu (it takes no arguments), or None."""
    marker = item.get_closest_marker("tpu")
    if marker is None or not (marker.args or marker.kwargs):
        return None
    given = [repr(a) for a in marker.args] + [f"{k}={v!r}" for k, v in marker.kwargs.items()]
    return (
        f"@pytest.mark.tpu takes no arguments; got tpu({', '.join(given)}) in {item.nodeid}. "
        f"Write @pytest.mark.tpu, and choose the TPU with --tpu (e.g. --tpu=auto, or "
        f"--tpu=NAME for a TPU of that name)."
    )


def check_tpu(item):
    """Fails the test when its @pytest.mark.tpu has arguments."""
    problem = tpu_problem(item)
    if problem:
        pytest.fail(problem, pytrace=False)


def count(item, name):
    """The n of @pytest.mark.<name>(n), None when left out; fails a bad n."""
    n, problem = count_problem(item, name)
    if problem:
        pytest.fail(problem, pytrace=False)
    return n


def _valid(keyword, value):
    if keyword == "has_chief":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if keyword == "ps":
        return isinstance(value, int) and value >= 0
    return 0 < value <= _env.MAX_SECONDS  # timeout (nan fails both)


def cluster_shape(item):
    """The `local_cluster` arguments of the test's multi_worker marker:
    {"num_workers": n, "has_chief": bool, "ps": int}, and "timeout" where the
    marker gives one; fails a bad one."""
    n = count(item, "multi_worker")
    marker = item.get_closest_marker("multi_worker")
    given = {} if marker is None else marker.kwargs
    shape = {"num_workers": DEFAULT_WORKERS if n is None else n}
    for keyword, accepted in CLUSTER_KEYWORDS.items():
        if keyword not in given and keyword not in _SHAPE_DEFAULTS:
            continue
        value = given.get(keyword, _SHAPE_DEFAULTS.get(keyword))
        if not _valid(keyword, value):
            pytest.fail(
                f"@pytest.mark.multi_worker({keyword}=...) must be {accepted}; got {value!r} in "
                f"{item.nodeid}. Write e.g. @pytest.mark.multi_worker(2, {keyword}="
                f"{_EXAMPLES[keyword]}).",
                pytrace=False,
            )
        shape[keyword] = value
    return shape


def skip_tpu_tests_on_the_fake(session, items):
    """Marks the `tpu` tests skipped when the chosen TPU is the fake."""
    # A test with a bad marker is not skipped: it fails at set-up, saying why.
    tpu_tests = [
        item for item in items
        if item.get_closest_marker("tpu") is not None and tpu_problem(item) is None
    ]
    if not tpu_tests or not session.usable:
        return  # Nothing to mark, or every test fails anyway.
    choice = session.tpu()
    if not session.usable:
        return
    chosen = choice.backend()
    if chosen.is_real:
        return
    settings = session.settings
    # A skip mark rather than a skip call here, so the report points at the test.
    skip = pytest.mark.skip(
        reason=f"needs a real TPU; the TPU here is {chosen.describe()} "
        f"(--tpu={settings.tpu}, from {settings.source('tpu')})"
    )
    for item in tpu_tests:
        item.add_marker(skip)
