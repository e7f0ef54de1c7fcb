"""A new smoke check is one row of `smoke.table.CHECKS`: it runs, is reported and offered.

The row is added for one test (monkeypatch); `run_checks`, the text and JSON
reports and the command's --help and --inject-failure all see it.
"""

import pytest

from compat_distribute.smoke import cli
from compat_distribute.smoke import targets as smoke_targets
from compat_distribute.smoke import run as smoke_run
from compat_distribute.smoke import report as smoke_report
from compat_distribute.smoke import checks
from compat_distribute.smoke import table as table_lib

def _even(target, measured):
    measured["halves"] = target.replicas // 2
    if target.replicas % 2:
        raise checks.CheckFailed(f"replicas: expected an even count, got {target.replicas}")
    return f"{target.replicas} replicas, {target.replicas // 2} pairs"


@pytest.fixture(name="table")
def table_fixture(monkeypatch):
    new = table_lib.Check("replica_count_is_even", _even, "the replica count is even")
    monkeypatch.setattr(table_lib, "CHECKS", table_lib.CHECKS + (new,))
    return table_lib.CHECKS


def test_the_new_check_runs_and_is_reported_after_the_others(table):
    # A target whose strategy is no strategy: every check written before fails
    # at once; the new one reads only the promised replica count.
    target = smoke_targets.Target(strategy=object(), device="nothing", replicas=4, steps_per_run=1)
    report = smoke_run.run_checks(target)
    assert [r.name for r in report.results] == [c.name for c in table]
    new = report.results[-1]
    assert (new.name, new.ok, new.detail) == ("replica_count_is_even", True, "4 replicas, 2 pairs")
    assert report.as_dict()["checks"][-1]["name"] == "replica_count_is_even"
    width = len("replica_count_is_even")  # the longest name sets the column
    assert smoke_report.format_result(new).startswith(f"  PASS  {'replica_count_is_even':<{width}}  ")
    assert smoke_report.format_footer(report).startswith("1/9 checks passed, 1 skipped in ")


def test_the_command_lists_the_new_check_and_can_fail_it(table):
    parser = cli.build_smoke_parser()
    assert "  replica_count_is_even the replica count is even" in parser.format_help()
    args = parser.parse_args(["--inject-failure", "replica_count_is_even"])
    target = smoke_targets.Target(strategy=object(), device="nothing", replicas=3, steps_per_run=1)
    report = smoke_run.run_checks(target, inject_failure=args.inject_failure)
    assert report.results[-1].detail == (
        "failure injected by --inject-failure "
        "(measured: replicas: expected an even count, got 3)"
    )


def test_without_the_row_the_command_refuses_the_name(capsys):
    with pytest.raises(SystemExit):
        cli.build_smoke_parser().parse_args(["--inject-failure", "replica_count_is_even"])
    assert "invalid choice: 'replica_count_is_even'" in capsys.readouterr().err
