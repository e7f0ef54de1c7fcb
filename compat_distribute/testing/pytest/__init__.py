"""The pytest plugin, one module a role (`hooks` is the plugin pytest loads).

    options   the one table of options, and the precedence of their places
    session   the session's state: settings, the process's role, the chosen TPU
    devices   the logical CPU devices a run needs, created before any test runs
    markers   tpu, multi_device(n), multi_worker(n)
    fixtures  tpu_resolver, tpu_strategy, mirrored_strategy, strategy, local_cluster
    ending    ends the process once a session that used TensorFlow is over
    hooks     pytest's hooks, each calling the module of its role

Imported by absolute names only (`compat_distribute.testing.pytest.hooks`), so
the package never stands in for pytest itself. Nothing here imports TensorFlow
until a test needs it.
"""
