"""What the test folders share, imported as `support` (`from support import processes`).

    processes  is a pid running; a process's descendants; wait_for, wait_gone
    leftovers  what a launch may leave besides processes: temp directories, listening sockets
    programs   run_program / run_python: a test's Python program, forked warm or fresh,
               in a TMPDIR of its own that it must leave empty
    forkrun    the warm interpreter that forks those programs
    steps      replica_ids_summed: one traced step's all-reduce of the replica ids
    load       bound: a wall-time bound stretched with the machine's load

`tests/` is on sys.path in a session (pytest puts the folder of the root
conftest.py there); a program a test starts gets it through PYTHONPATH
(`programs.TESTS`).
"""
