"""The smoke test: a table of TF1-style checks run through the shims (`compat-distribute smoke`).

Its public face is the command; the modules are internal, one a concern:

    cli       the command line (`python -m compat_distribute` runs it too)
    table     `CHECKS`, the table naming the checks (a new check is a row); no TensorFlow
    checks    the checks themselves
    targets   `target(backend, steps_per_run)`: the strategy on the chosen hardware
              (`compat_distribute.testing._backend` chooses it)
    run       `run_checks`, warnings caught per check, `Report`
    report    the text report
    progress  the TTY ticker

Nothing here imports TensorFlow until a check or a target needs it.
"""
