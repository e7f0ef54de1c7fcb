"""A pod's hosts are cluster tasks: the pod tests check processes, directories
and listening sockets with the cluster tests' `cluster_checks`, one module for
both folders. Pytest's prepend import mode puts only a test's own folder on
sys.path, so this puts tests/cluster there too (the pod programs' child
processes get it through `pod_helpers.env`)."""

import sys

from pod_helpers import CLUSTER_TESTS

if CLUSTER_TESTS not in sys.path:
    sys.path.insert(0, CLUSTER_TESTS)
