"""The text report: a header, one line per check as it finishes, a footer."""

from compat_distribute.smoke import table as table_lib

def format_header(target):
    return f"compat-distribute smoke: {target.device}, steps_per_run={target.steps_per_run}"


def format_result(result):
    status = "SKIP" if result.skipped else ("PASS" if result.ok else "FAIL")
    width = max(len(check.name) for check in table_lib.CHECKS)
    return f"  {status}  {result.name:<{width}}  {result.seconds:6.2f}s  {result.detail}"


def format_footer(report):
    lines = []
    if report.steps_per_second is not None:
        lines.append(
            f"training: {report.steps_per_second:g} steps/s "
            f"({report.steps_per_run} steps per run_steps call)"
        )
    if report.deprecations:
        lines.append(
            f"TF1-style calls raised {len(report.deprecations)} deprecation warning(s), "
            f"as expected: " + "; ".join(report.deprecations)
        )
    passed = sum(r.ok and not r.skipped for r in report.results)
    skipped = sum(r.skipped for r in report.results)
    summary = f"{passed}/{len(report.results)} checks passed"
    if skipped:
        summary += f", {skipped} skipped"
    lines.append(f"{summary} in {report.seconds:.1f}s")
    for r in report.failures:
        lines.append(f"FAILED {r.name}: {r.detail}")
    return "\n".join(lines)
