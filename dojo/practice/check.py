"""The practice loop's step: grade the workspace copy, write its results file, record the attempt.

`check(slug)` is what `dojo check` and `dojo watch` run (and, examples only, a mock interview's
check): dojo.grading.grade.grade on the workspace copy, dojo.practice.report.write_results into
workspace/results/<slug>.json, dojo.practice.history.record_result into the progress database. Not
the grading itself (dojo.grading.grade), the printing (dojo.practice.report) or notebooks (dojo.notebook).
"""

from __future__ import annotations

from dojo.grading import grade
from dojo.practice import history, report, rerun, workspace


def check(
    slug: str,
    *,
    mode: str = "check",
    examples_only: bool = False,
    timeout: float | None = None,
    rerun_inconclusive: bool = False,
) -> grade.GradeResult:
    """The practice loop's step: grade the workspace copy, write results/<slug>.json, record the attempt.

    rerun_inconclusive: run only the tests that the last results/<slug>.json left inconclusive, and
    merge their new outcomes into it. Raises ValueError when there is nothing to re-run, or when the
    file changed since (then a full `dojo check` is what is needed).
    """
    if rerun_inconclusive:
        result = rerun.rerun_inconclusive(slug, workspace.results_file(slug), timeout)
    else:
        result = grade.grade(slug, "workspace", examples_only=examples_only, timeout=timeout)
    report.write_results(result, workspace.results_file(slug))
    history.record_result(result, mode=mode)
    return result
