"""`dojo check --rerun-inconclusive`: run again only the timing tests the last check left inconclusive.

Their new outcomes replace the old rows of workspace/results/<slug>.json, when the graded file's
sha256 stored there still matches. Only for the workspace's .py file: not notebooks, and not
take-homes (`dojo grade` stores no grading to merge into).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from dojo.grading import grade
from dojo.grading.result import GradeResult, TestResult, score


def rerun_inconclusive(slug: str, results_file: Path, timeout: float | None) -> GradeResult:
    """The last full grading of the workspace copy (its results.json), with its inconclusive tests run
    again and their new outcomes merged in. Raises ValueError when there is no such grading, it left
    nothing inconclusive, or the file changed since (the merge would mix two files' results)."""
    doc = _last_check(results_file)
    if doc is None:
        raise ValueError(
            f"no results of a full check of {slug!r} at {results_file}: run `dojo check {slug}` first"
        )
    unsure = set(doc.get("inconclusive") or [])
    if not unsure:
        raise ValueError(f"the last check of {slug!r} left no test inconclusive: nothing to re-run")
    if doc.get("examples_only") or doc.get("target") != "workspace" or doc.get("status") == "error":
        raise ValueError(
            f"the last check of {slug!r} was not a full, clean run of the workspace copy: "
            f"run `dojo check {slug}`"
        )
    fields = set(TestResult.__dataclass_fields__)
    before = [TestResult(**{k: v for k, v in t.items() if k in fields}) for t in doc["tests"]]
    fresh = grade.grade(slug, "workspace", timeout=timeout, only=[t.name for t in before if t.id in unsure])
    if fresh.digest != doc.get("digest"):
        raise ValueError(
            f"{fresh.path} changed since the last check: run `dojo check {slug}` to grade all of it"
        )
    again = {t.id: t for t in fresh.tests}
    tests = [again.get(t.id, t) if t.id in unsure else t for t in before]
    error = fresh.error
    points, total, passed = score(tests, error)
    return GradeResult(
        slug=slug,
        target="workspace",
        path=fresh.path,
        tests=tests,
        points=points,
        total=total,
        passed=passed,
        duration=fresh.duration,
        started=fresh.started,
        error=error,
        notes=fresh.notes
        + [
            f"re-ran {len(unsure)} inconclusive test(s); the other results are from the check of "
            f"{time.strftime('%H:%M:%S', time.localtime(doc.get('started', 0)))}"
        ],
        output=fresh.output,
        digest=fresh.digest,
    )


def _last_check(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("tests"), list) else None
