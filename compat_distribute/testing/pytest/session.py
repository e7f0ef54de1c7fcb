"""The plugin's state for one pytest session: its settings, its process's role, its TPU.

An xdist worker keeps a problem and fails each test with it (xdist would restart it).
"""

import dataclasses

import pytest

from compat_distribute.testing.pytest import options

_SESSION = pytest.StashKey()


@dataclasses.dataclass(frozen=True)
class Role:
    """What a process of the session does."""

    name: str
    runs_tests: bool
    can_stop_session: bool  # by a usage error

    @staticmethod
    def of(config):
        if hasattr(config, "workerinput"):
            return WORKER
        if getattr(config.option, "dist", "no") != "no":
            return CONTROLLER
        return MAIN


MAIN = Role("main", runs_tests=True, can_stop_session=True)
CONTROLLER = Role("xdist controller", runs_tests=False, can_stop_session=True)
WORKER = Role("xdist worker", runs_tests=True, can_stop_session=False)


class Choice:
    """The TPU of the session, as one of the classes below."""

    local_cores = 0  # the fake TPU's cores on this process's devices

    def describe(self):
        raise NotImplementedError

    def backend(self):
        """The `Backend` the tests use; fails the running test when there is none."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Chosen(Choice):
    """A TPU this process uses, real or fake."""

    chosen: object  # a `_backend.Backend`

    @property
    def local_cores(self):
        return self.chosen.local_cores

    def describe(self):
        return self.chosen.describe()

    def backend(self):
        return self.chosen


@dataclasses.dataclass(frozen=True)
class LeftToWorkers(Choice):
    """A real or "auto" TPU on an xdist controller: each worker chooses and connects."""

    tpu: str

    def describe(self):
        done = "chosen" if self.tpu == "auto" else "connected"
        return f"{self.tpu} ({done} in each xdist worker)"

    def backend(self):
        raise RuntimeError("an xdist controller runs no tests, so it has no TPU to give them")


@dataclasses.dataclass(frozen=True)
class Unusable(Choice):
    """Why this xdist worker cannot run the tests: each test fails with it."""

    tpu: str
    problem: str

    def describe(self):
        return f"{self.tpu} (not usable)"

    def backend(self):
        pytest.fail(self.problem, pytrace=False)


def _unreachable(settings, error):
    # "auto" was told of this TPU by the environment: the error says how to change it.
    auto = "" if settings.tpu == "auto" else ", or --tpu=auto to use a TPU only when one is here"
    return (
        f"--tpu={settings.tpu} (from {settings.source('tpu')}): {error}\nNot falling "
        f"back to the fake TPU: pass --tpu=fake to use the fake{auto}."
    )


class Session:
    """The settings, the role, the TPU (chosen on first use) and the devices created."""

    def __init__(self, settings, role):
        self.settings = settings
        self.role = role
        self.devices = None  # (count, why) created after collection, for the report
        self._choice = None  # not chosen yet: see `tpu`

    def tpu(self):
        """The TPU `Choice`, made on first use (a run that needs no TPU never makes it)."""
        if self._choice is None:
            self._choice = self._choose()
        return self._choice

    @property
    def usable(self):
        return not isinstance(self._choice, Unusable)

    def stop(self, problem):
        """Stops the session with `problem`; in an xdist worker, fails each test with it."""
        if self.role.can_stop_session:
            raise pytest.UsageError(problem)
        self._choice = Unusable(self.settings.tpu, problem)

    def _choose(self):
        # The one import of the chooser.
        from compat_distribute.testing import _backend  # pylint: disable=g-import-not-at-top

        settings = self.settings
        try:
            if settings.tpu != "fake" and not self.role.runs_tests:
                if settings.tpu != "auto":  # A name that does not resolve stops it here.
                    _backend.check_resolves(settings.tpu)
                return LeftToWorkers(settings.tpu)
            chosen = _backend.choose(settings)
            if not chosen.is_real:
                options.check_devices_hold_fake(settings, chosen.local_cores)
        except _backend.TPUUnreachableError as e:
            return self._unusable(_unreachable(settings, e))
        except options.SettingError as e:
            return self._unusable(str(e))
        return Chosen(chosen)

    def _unusable(self, problem):
        self.stop(problem)
        return self._choice


def start(config):
    """Reads the settings (a bad one is a usage error) and keeps the session in `config`."""
    try:
        settings = options.from_config(config)
    except options.SettingError as e:
        raise pytest.UsageError(str(e)) from None
    session = config.stash[_SESSION] = Session(settings, Role.of(config))
    return session


def of(config):
    """The session that `start` kept; None before it (or when it failed)."""
    return config.stash.get(_SESSION, None)
