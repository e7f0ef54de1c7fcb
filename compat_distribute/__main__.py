"""`python -m compat_distribute`: the `compat-distribute` command (see `compat_distribute.smoke.cli`)."""

from compat_distribute.smoke.cli import entry

if __name__ == "__main__":
    entry()
