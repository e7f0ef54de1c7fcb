"""`FakePod`: the hosts of a multi-host TPU slice, as local server processes.

This process drives them over gRPC as a pod's client does; a host that dies is
named at once instead of hanging the step.
"""

import atexit
import os
import math
import sys
import threading
import weakref

import tensorflow as tf

from compat_distribute import _env
from compat_distribute import _patching
from compat_distribute.testing import _tf
from compat_distribute.testing import devices as devices_lib
from compat_distribute.testing._fake_tpu import pod_reduce
from compat_distribute.testing.cluster import host as host_lib
from compat_distribute.testing.cluster import netns

JOB = "worker"
# Where the hosts' servers listen: "auto" (a private network reached through a
# relay, where the platform allows), "private" or "host" (see LocalServers).
NETWORK_ENV = "COMPAT_DISTRIBUTE_POD_NETWORK"
# Seconds the hosts may take to start (each imports TensorFlow).
START_TIMEOUT_S = 120
# How often the watchdog looks at the hosts.
_WATCH_INTERVAL_S = 0.25
# TensorFlow's switch (read at each remote call) for sending a client's remote
# ops without waiting for their results. On, a step placed on a host returns at
# once and its error (the end of its data) surfaces later, where a result is
# read, as a ValueError from `Tensor.device`; off, the step raises it, as on one
# host. `tf.experimental.async_scope()` turns it on for its block, as it does
# on a pod.
STREAMING_ENQUEUE_ENV = "TF_ENABLE_EAGER_CLIENT_STREAMING_ENQUEUE"


# The pods whose hosts run. At exit each is stopped before the launchers stop
# their hosts (atexit runs the handlers registered last first): this process
# leaves the hosts while they serve, so the functions and contexts TensorFlow
# drops later are not sent to hosts that are gone (each logged an error).
_RUNNING = weakref.WeakSet()


@atexit.register
def _stop_running_pods():
    for pod in list(_RUNNING):
        pod.stop()


def _reading_that_clears_end_of_data(next_internal):
    def read_next(iterator):
        try:
            return next_internal(iterator)
        except tf.errors.OutOfRangeError as error:
            _tf.clear_errors_of_call_executors(error)
            raise

    return read_next


_END_OF_DATA_CLEARED = []  # the one started patch, kept for the process


def clear_end_of_data_on_hosts():
    """An eager iterator's next element, read where a host's data ended, leaves
    no error on the executor that read it (see `_tf.clear_errors_of_call_executors`).

    Process-wide and kept: it only catches and re-raises the end of data.
    Idempotent; patched through `_patching`.
    """
    if _END_OF_DATA_CLEARED:
        return
    owner = _tf.iterator_ops.OwnedIterator
    next_internal = _patching.original(owner, "_next_internal")
    _END_OF_DATA_CLEARED.append(
        _patching.Patch(
            [(owner, "_next_internal", _reading_that_clears_end_of_data(next_internal))]
        ).start()
    )


def _client_port():
    """The port of this process's own server, which connecting started."""
    server_def = _tf.get_server_def()
    (job,) = [job for job in server_def.cluster.job if job.name == server_def.job_name]
    return int(job.tasks[server_def.task_index].rsplit(":", 1)[1])


# The pods of the fakes in force (innermost last; see `system.activate`): a
# resolver of the same slice built meanwhile joins their hosts.
_SHARED = []


def shared(name):
    """The hosts of the innermost pod `name` in force, or None."""
    return next((pod for pod in reversed(_SHARED) if pod.name == name), None)


def share(pod):
    _SHARED.append(pod)


def unshare(pod):
    _SHARED.remove(pod)


def _cluster_already_connected(spec):
    """This process's cluster (a `ClusterDef`, its own job included) when it is
    connected to the hosts of `spec` already, else None.

    Each `connect_to_cluster` without this process's job in the cluster names
    a new port for it (`TF_PickUnusedPortOrDie`), but a process's server keeps
    the port it started on when the hosts stay the same (TensorFlow updates
    the server def in place): the hosts would call this process back at a port
    where nothing of it listens, and where another program (another pod's
    client or relay) may listen. Connecting again with this cluster keeps the
    port that the server has.
    """
    server_def = _tf.get_server_def()
    if server_def is None:
        return None
    hosts = {job.name: dict(job.tasks) for job in server_def.cluster.job}
    own = hosts.pop(server_def.job_name, None)
    wanted = {job: dict(enumerate(spec.job_tasks(job))) for job in spec.jobs}
    if own is None or hosts != wanted:
        return None
    cluster = type(server_def.cluster)()
    cluster.CopyFrom(server_def.cluster)
    return cluster


def _server_def_without(hosts_spec, before):
    """This process's server def with the jobs of `hosts_spec` taken out: the
    cluster of `before` (a server def, or None for no cluster), this process's
    own job kept as it is now (its server's port)."""
    server_def = _tf.get_server_def()
    restored = type(server_def)()
    restored.CopyFrom(server_def)
    own = [job for job in server_def.cluster.job if job.name == server_def.job_name]
    others = [] if before is None else [
        job for job in before.cluster.job
        if job.name != server_def.job_name and job.name not in hosts_spec.jobs
    ]
    del restored.cluster.job[:]
    for job in others + own:
        restored.cluster.job.add().CopyFrom(job)
    return restored


def for_slice(name, mesh, hosts, device_type):
    """A new `FakePod` (not started) for a slice of `hosts` > 1 hosts; None for one host.

    Its network is $COMPAT_DISTRIBUTE_POD_NETWORK ("auto" when unset).
    """
    if hosts == 1:
        return None
    if device_type != "CPU":
        raise ValueError(
            f"device_type must be 'CPU' for the pod {name!r} (its hosts' cores are CPU "
            f"devices of server processes); got {device_type!r}. Pass hosts=1 for every "
            f"core in this process."
        )
    network = _env.read(NETWORK_ENV)
    return FakePod(name, hosts, math.prod(mesh) // hosts, network=network)


class FakePod:
    """`hosts` server processes of `cores_per_host` cores each; see the module.

    `start_timeout`: seconds the hosts may take to serve (then `start()` raises
    `ClusterTimeoutError` with their stacks); `network`: where the hosts' servers
    listen, as for `LocalServers` ("auto": in a private network, reached through
    a relay, where the platform allows; "host": on this machine's interfaces);
    `hooks`: a cluster `LaunchHooks` for tests that inject faults into the launches.
    """

    def __init__(
        self,
        name,
        hosts,
        cores_per_host,
        *,
        start_timeout=START_TIMEOUT_S,
        network="auto",
        hooks=None,
    ):
        self.name = name
        self.num_hosts = hosts
        self.cores_per_host = cores_per_host
        self._start_timeout = start_timeout
        self._network = netns.check(network)
        self._hooks = hooks
        self._servers = None
        self._connected_spec = None  # the cluster this process is connected to
        # (server def, default device) of this process before it connected here.
        self._before_connecting = None
        self._watchdog = None
        self._stop_watching = threading.Event()
        # What the watchdog saw last: "host 2 (worker 2, pid 123, was killed by SIGKILL)".
        self.failure = None

    def __repr__(self):
        state = "running" if self.running else "stopped"
        return f"FakePod({self.name!r}, hosts={self.num_hosts}, {state})"

    # Devices, as TensorFlow names them once connected.

    def host_cores(self, host):
        return tuple(
            f"/job:{JOB}/replica:0/task:{host}/device:CPU:{core}"
            for core in range(self.cores_per_host)
        )

    @property
    def core_devices(self):
        """Every core, host-major: the replicas' order, as on a pod."""
        return tuple(d for host in range(self.num_hosts) for d in self.host_cores(host))

    # Life cycle.

    @property
    def running(self):
        return self._servers is not None and self._servers.running

    @property
    def pids(self):
        return [] if self._servers is None else self._servers.pids

    @property
    def network(self):
        """ "private" (the hosts in a network of their own, reached through a
        relay) or "host"; resolving "auto" warns where it falls back to "host"."""
        self._network = netns.choose(
            self._network,
            who=f"fake TPU pod {self.name} runs its hosts",
            opt_out=f"Set ${NETWORK_ENV}=host",
        )
        return self._network

    @property
    def relay_pid(self):
        """The process that relays this process's connections to the hosts (None
        on the host network, or stopped)."""
        return None if self._servers is None else self._servers.relay_pid

    @property
    def zygote_pid(self):
        """The process that forked the hosts (see docs/clusters.md); None when they
        are fresh processes, or stopped."""
        return None if self._servers is None else self._servers.zygote_pid

    @property
    def directory(self):
        """The running hosts' temporary directory (their logs and TMPDIRs), else None."""
        return None if self._servers is None else self._servers.directory

    def start(self):
        """Launches the hosts (if not running); returns once every host serves."""
        if self.running:
            return self
        self.stop()
        self._servers = host_lib.LocalServers(
            self.num_hosts,
            devices_per_host=self.cores_per_host,
            start_timeout=self._start_timeout,
            network=self.network,
            hooks=self._hooks,
            owner=f"fake TPU pod {self.name}",
        )
        self._servers.start()
        _RUNNING.add(self)
        self.failure = None
        self._stop_watching = threading.Event()
        self._watchdog = threading.Thread(
            target=self._watch,
            args=(self._servers, self._stop_watching),
            name=f"fake TPU pod {self.name} watchdog",
            daemon=True,
        )
        self._watchdog.start()
        return self

    def stop(self):
        """Stops every host: asked to exit, then killed; nothing is left behind.

        This process leaves the hosts first, while they still serve: leaving
        closes its contexts on them, which logs an error per host once they
        are gone.
        """
        self._stop_watching.set()
        if self._watchdog is not None:
            self._watchdog.join()
            self._watchdog = None
        _RUNNING.discard(self)
        try:
            self._disconnect()
        finally:
            if self._servers is not None:
                self._servers.stop()
                self._servers = None

    def _disconnect(self):
        """Takes the stopped hosts out of this process's eager context, which
        keeps a cluster's hosts until told otherwise (each new function would be
        sent to them: UnavailableError), and gives back the default device and
        the cluster it had before connecting (none, or another pod's)."""
        spec, self._connected_spec = self._connected_spec, None
        before, self._before_connecting = self._before_connecting, None
        if spec is None or _cluster_already_connected(spec) is None:
            return  # Not connected here, or connected elsewhere since.
        server_def, device = before
        _tf.context().update_server_def(_server_def_without(spec, server_def))
        _tf.set_default_device(device)

    def check(self):
        """Raises `ClusterTaskError` naming the first host that died."""
        if self._servers is not None:
            self._servers.check()

    def _watch(self, servers, stop):
        reported = set()
        while not stop.wait(_WATCH_INTERVAL_S):
            for task_id, what in servers.faults():
                if task_id in reported:
                    continue
                reported.add(task_id)
                if task_id is None:  # The relay: no host can be reached.
                    self.failure = f"the relay to the hosts ({what})"
                    fails = f"fails (UnavailableError naming a host of /job:{JOB})"
                else:
                    self.failure = f"host {task_id} ({what})"
                    fails = f"fails (UnavailableError naming /job:{JOB}/replica:0/task:{task_id})"
                print(
                    f"fake TPU pod {self.name}: {self.failure}; the next step {fails}. Stop "
                    f"the fake and start it again for fresh hosts.",
                    file=sys.stderr,
                    flush=True,
                )

    # The cluster, as a TPU pod's resolver reports it.

    def cluster_spec(self):
        self.start()
        return tf.train.ClusterSpec({JOB: list(self._servers.cluster_spec[JOB])})

    def master(self):
        return "grpc://" + self.cluster_spec().task_address(JOB, 0)

    def connect(self, *args, **kwargs):
        """`tf.config.experimental_connect_to_cluster` to the hosts; the arguments are its own."""
        spec = self.cluster_spec()
        if self._before_connecting is None:
            before = _tf.get_server_def()  # TensorFlow edits it in place: a copy
            before = None if before is None else type(before).FromString(before.SerializeToString())
            self._before_connecting = (before, _tf.default_device())
        cluster = _cluster_already_connected(spec)
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            spec if cluster is None else tf.train.ClusterSpec(cluster), master=self.master()
        )
        # The hosts' contexts for this client take its pool size where it names one.
        with _tf.remote_contexts_inter_op_threads(devices_lib.inter_op_threads(self.cores_per_host)):
            _tf.connect_to_cluster(resolver, *args, **kwargs)
        os.environ[STREAMING_ENQUEUE_ENV] = "False"
        clear_end_of_data_on_hosts()
        self._connected_spec = spec

    def ensure_connected(self):
        """Connects unless connected to these hosts already: host 0's first core
        becomes the default device, as `experimental_connect_to_cluster` makes it,
        so eager reads of a variable (Keras' `save_weights`) run on a replica's core."""
        spec = self.cluster_spec()
        if self._connected_spec is None or self._connected_spec.as_dict() != spec.as_dict():
            self.connect()

    # Input.

    def synced_input(self, iterator):
        """`iterator` (a V1 distributed iterator), returned once the hosts have
        run the ops that made it; its eager `initialize()` returns once they
        have run the ops that reset it.

        A host runs the ops a client sends it in the order sent but after
        answering (TensorFlow runs a client's stream of ops on an asynchronous
        executor), while a `tf.function` step reaches it by another call. A
        MultiDeviceIterator's reset queues its Init (a new incarnation) and then
        one make_iterator per core: a step called at once could read a core
        whose make_iterator had not run yet, through the reader of the old
        incarnation, and fail with "Invalid incarnation id. Provided: 1;
        Expected: 2" in MultiDeviceIteratorGetNextFromShard.
        """
        if not tf.executing_eagerly():
            return iterator
        _tf.async_wait()
        reset = iterator.initialize

        def initialize():
            ops = reset()
            if tf.executing_eagerly():
                _tf.async_wait()
            return ops

        iterator.initialize = initialize  # `initializer` calls it too
        return iterator

    # The strategy.

    def init_extended(self, extended, container_strategy, devices):
        """Builds MirroredExtended `extended` over `devices` of this pod's hosts.

        The caller gives it TPUStrategy's input pipelines (one per host).
        """
        if tf.compat.v1.executing_eagerly_outside_functions():
            self.ensure_connected()
            # The hosts call this process back (its server, the "localhost" job).
            self._servers.forward_to_client(_client_port())
        else:
            # TF1 graph mode: a session to master(), whose config carries the
            # cluster_def (strategy.configure), reaches the hosts.
            self.start()
        with _tf.devices_of_several_hosts_allowed():
            _tf.MirroredExtended.__init__(
                extended,
                container_strategy,
                devices=list(devices),
                # Within each host first, then one transfer per host. Stock
                # MirroredStrategy's default for devices on several hosts, a
                # RING collective over every core, passes each step around all
                # cores in turn; ReductionToOneDevice sends every core's value
                # over gRPC (benchmarks/bench_pods.py).
                cross_device_ops=pod_reduce.HostFirstReduction(),
            )
