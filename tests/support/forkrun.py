"""Python programs of the tests, forked from a warm interpreter instead of started fresh.

A fresh `python -c` that imports TensorFlow pays ~2.5 s of CPU for the import.
`WarmPython` starts one interpreter per test session (per xdist worker) that
imports TensorFlow and numpy without running an op (Keras only as far as
TensorFlow's import loads it: the variables that choose Keras count as read at
import), then forks one child per program with the cluster
zygote's machinery (`compat_distribute.testing.cluster.zygote`): the zygote
refuses to fork once TensorFlow's runtime is initialised or a second thread
runs. The child takes the program's environment, cwd, argv, stdout and stderr
(files this process reads), runs it as `__main__`, and exits with the status
`python` would give. The warm interpreter dies with this process
(parent-death signal, and it polls whether it was orphaned).

A program whose environment differs from the warm interpreter's in a variable
read at import (`reads_at_import`) runs in a fresh process instead.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing import connection

from compat_distribute.testing.cluster import protocol

__all__ = ["WarmPython", "reads_at_import", "same_at_import"]

# Prefixes of the variables TensorFlow, numpy, Keras or Python read at import:
# TF's __init__ reads TF_USE_LEGACY_KERAS, its C++ core TF_CPP_* and
# TF_ENABLE_ONEDNN_OPTS, the loader CUDA_*/LD_*. Keras (which TF imports) reads
# KERAS_BACKEND, KERAS_HOME and HOME's ~/.keras/keras.json.
_IMPORT_TIME = ("TF_", "TF2_", "KERAS_", "PYTHON", "CUDA_", "XLA_", "NPY_", "OMP_",
                "OPENBLAS_", "MKL_", "KMP_", "LD_", "GRPC_", "TPU_", "ABSL_")
# Read later than import, by the code that runs (TF reads TF_CONFIG when a
# resolver or server is made; tempfile's cache is reset in the child).
_LATE = ("TF_CONFIG", "TMPDIR")
_ORPHAN_EXIT_CODE = 70
# How long the warm interpreter may take to import TensorFlow, or to answer.
_START_S = 120.0
_ANSWER_S = 30.0
# The command of the warm interpreter: a plain `python -c`, as a program is.
_SERVE = ("import sys; sys.path.insert(0, {tests!r}); from support import forkrun; "
          "forkrun._serve({fd}, {parent}, {imports!r})")


def reads_at_import(name):
    """Whether TensorFlow, numpy, Keras or Python may read variable `name` at import."""
    return name not in _LATE and (name.startswith(_IMPORT_TIME) or name == "HOME")


def same_at_import(env, other):
    """Whether environments `env` and `other` agree in every variable read at import."""

    def at_import(environment):
        return {k: v for k, v in environment.items() if reads_at_import(k)}

    return at_import(env) == at_import(other)


class WarmPython:
    """This process's end of the warm interpreter; `run` is `subprocess.run`-like."""

    # The pids of those running, started by this process (for leak checks).
    running = set()

    def __init__(self, env, imports=("numpy",)):
        """Starts it with environment `env`; it imports TensorFlow and `imports`."""
        self.env = dict(env)
        parent_end, child_end = socket.socketpair()
        code = _SERVE.format(tests=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             fd=child_end.fileno(), parent=os.getpid(), imports=list(imports))
        # Its own output (TensorFlow's import logs), read back when it fails.
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], env=self.env, pass_fds=(child_end.fileno(),),
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, start_new_session=True)
        child_end.close()
        WarmPython.running.add(self.process.pid)
        self._conn = connection.Connection(parent_end.detach())
        self._carrier = socket.socket(fileno=os.dup(self._conn.fileno()))
        self._statuses = {}
        message = self._next(_START_S)  # Ready, or StartupFailed with the traceback.
        if not isinstance(message, protocol.Ready):
            output = _read(self._log)[-3000:]
            self.stop()
            raise RuntimeError(f"the warm Python interpreter did not start: {message!r}; "
                               f"its output:\n{output}")

    def forkable(self, env):
        """Whether a program with environment `env` may be forked from it."""
        return same_at_import(env, self.env)

    def run(self, argv, *, env, timeout, cwd=None):
        """Runs `argv` (["-c", code, ...] or [script, ...]) in a forked child;
        returns a CompletedProcess with text stdout and stderr. On timeout, kills
        the child's process group and raises subprocess.TimeoutExpired."""
        if argv[0].startswith("-") and argv[0] != "-c":
            raise ValueError(f"a forked program runs `-c CODE` or a script, not {argv[0]}; "
                             f"run it in a fresh process")
        mode, target, *args = argv if argv[0] == "-c" else ["script", *argv]
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            self._conn.send(protocol.Fork(
                mode, (os.path.abspath(cwd or os.getcwd()), target, *args), dict(env)))
            socket.send_fds(self._carrier, [b"f"], [out.fileno(), err.fileno()])
            message = self._next(_ANSWER_S)
            if isinstance(message, protocol.ForkRefused):
                raise RuntimeError(f"the warm Python interpreter refused to fork: {message.reason}")
            if not isinstance(message, protocol.Forked):
                raise RuntimeError(f"the warm Python interpreter did not fork: {message!r}")
            pid = message.pid
            try:
                code = self._wait(pid, timeout)
            finally:
                if pid not in self._statuses:
                    _kill_group(pid)
                self._reap(pid)
            stdout, stderr = (_read(f) for f in (out, err))
        if code is None:
            raise subprocess.TimeoutExpired([sys.executable, *argv], timeout, stdout, stderr)
        return subprocess.CompletedProcess([sys.executable, *argv], code, stdout, stderr)

    def stop(self):
        try:
            self._conn.send(protocol.Exit())
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        WarmPython.running.discard(self.process.pid)
        self._carrier.close()
        self._conn.close()
        self._log.close()

    def _wait(self, pid, timeout):
        deadline = time.monotonic() + timeout
        while pid not in self._statuses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            message = self._next(remaining)
            if message is not None and not isinstance(message, protocol.Exited):
                raise RuntimeError(f"the warm Python interpreter said {message!r} unasked")
        return self._statuses[pid]

    def _reap(self, pid):
        self._conn.send(protocol.Reap(pid))
        deadline = time.monotonic() + _ANSWER_S
        while not isinstance(self._next(deadline - time.monotonic()), protocol.Reaped):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the warm Python interpreter did not reap pid {pid}")
        self._statuses.pop(pid, None)

    def _next(self, timeout):
        """Its next message (an Exited status is also kept), or None after `timeout` s."""
        if not self._conn.poll(max(0.0, timeout)):
            return None
        try:
            message = self._conn.recv()
        except (EOFError, OSError) as e:
            raise RuntimeError(f"the warm Python interpreter (pid {self.process.pid}) died; "
                               f"its output:\n{_read(self._log)[-3000:]}") from e
        if isinstance(message, protocol.Exited):
            self._statuses[message.pid] = message.status
        return message


def _read(f):
    f.seek(0)
    return f.read().decode("utf-8", "replace")


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# -- In the warm interpreter ---------------------------------------------------


def _serve(fd, parent, imports):
    from compat_distribute.testing.cluster import bootstrap  # pylint: disable=g-import-not-at-top
    from compat_distribute.testing.cluster import zygote  # pylint: disable=g-import-not-at-top

    bootstrap._tie_to_parent(parent, True)  # pylint: disable=protected-access
    sys.path.pop(0)  # tests/: a program's sys.path is a fresh `python -c`'s.
    before = dict(os.environ)
    try:
        import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    except BaseException:  # pylint: disable=broad-except
        pass  # `serve` imports it again, and reports what fails.
    # TensorFlow's import sets TF2_BEHAVIOR and a default or two in os.environ,
    # which a program's environment, put in place after the fork, lacks.
    _SET_AT_IMPORT.update(
        {k: (before.get(k), v) for k, v in os.environ.items() if before.get(k) != v})
    zygote.serve(fd, parent, imports, _run_program, _ORPHAN_EXIT_CODE)


# Variable -> (value before, value after) TensorFlow's import, in the warm interpreter.
_SET_AT_IMPORT = {}


def _run_program(stdout_fd, warm, mode, argv):
    """The forked child (never returns): stderr and environment are the program's already."""
    from compat_distribute.testing.cluster import bootstrap  # pylint: disable=g-import-not-at-top

    bootstrap._tie_to_parent(warm, True)  # pylint: disable=protected-access
    os.dup2(stdout_fd, 1)
    os.close(stdout_fd)
    for name, (before, after) in _SET_AT_IMPORT.items():
        if os.environ.get(name) == before:  # As the import would have set it.
            os.environ[name] = after
    cwd, target, *args = argv
    os.chdir(cwd)
    for name in [n for n in sys.modules if n.split(".")[0] in ("compat_distribute", "forkrun")]:
        del sys.modules[name]  # A fresh program imports them itself.
    import builtins  # pylint: disable=g-import-not-at-top
    import types  # pylint: disable=g-import-not-at-top

    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    if mode == "-c":
        sys.argv = ["-c", *args]
        source, filename = target, "<string>"
    else:
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.realpath(target))
        with open(target, "rb") as f:
            source, filename = f.read(), target
        main.__file__ = os.path.join(cwd, target)  # Absolute (not normalised), as Python's.
        main.__cached__ = None
    sys.modules["__main__"] = main
    code = _exit_status(lambda: exec(compile(source, filename, "exec"), main.__dict__))
    if code == -signal.SIGINT:  # Python ends an uncaught KeyboardInterrupt by that signal.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _exit_status(run):
    """Runs `run` and ends as Python's own exit would; returns the status."""
    import threading  # pylint: disable=g-import-not-at-top
    import atexit  # pylint: disable=g-import-not-at-top

    try:
        run()
        code = 0
    except SystemExit as e:
        code = _system_exit_status(e)
    except BaseException as e:  # pylint: disable=broad-except
        tb = e.__traceback__.tb_next.tb_next  # Skips this frame and the lambda's.
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        code = -signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
    try:
        threading._shutdown()  # pylint: disable=protected-access
        atexit._run_exitfuncs()  # pylint: disable=protected-access
    except SystemExit as e:
        code = _system_exit_status(e)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # pylint: disable=broad-except
            pass
    return code


def _system_exit_status(e):
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1
