"""Wall-time bounds that allow for the machine's load."""

import os

from compat_distribute.testing import deadlines

# A bound stretches with the load average per core, by at most this factor: a
# shared 2-core machine runs at load 10-25, and a stall still fails.
MAX_STRETCH = 2.5


def bound(seconds):
    """`seconds` scaled by $COMPAT_DISTRIBUTE_TIMEOUT_SCALE, then by the
    1-minute load average per core, between 1 and `MAX_STRETCH`."""
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return deadlines.scaled(seconds) * min(MAX_STRETCH, max(1.0, per_core))
