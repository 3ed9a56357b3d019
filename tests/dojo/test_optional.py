"""An optional part (@pytest.mark.optional) is graded apart: its points stay out of points, total and the
pass, in practice and in judge mode, and reports show them in a section of their own.

The toy suite gains two optional tests (one measured in the candidate's process) and the toy reference
their function; each test grades a copy of that reference with the optional function broken or unwritten.
"""

from __future__ import annotations

import json

import pytest

from dojo.grading import grade
from dojo.grading.result import TestResult, score
from dojo.interview import takehome

OPTIONAL_TESTS = '''

@pytest.mark.optional
@pytest.mark.points(3)
def test_optional_mean(kata):
    """mean averages the numbers"""
    got = kata.mean([1, 2, 6])
    assert got == 3, f"mean([1, 2, 6]): got {got}, want 3"


@pytest.mark.optional
@pytest.mark.points(2)
@pytest.mark.candidate_process
def test_optional_mean_of_one(kata):
    """mean of one number is that number"""
    got = kata.mean([4])
    assert got == 4, f"mean([4]): got {got}, want 4"
'''
MEAN = "\n\ndef mean(xs: list[int]) -> float:\n    return sum(xs) / len(xs)\n"
WRONG_MEAN = "\n\ndef mean(xs: list[int]) -> float:\n    return 0\n"
UNWRITTEN_MEAN = "\n\ndef mean(xs: list[int]) -> float:\n    raise NotImplementedError\n"
HEADER = "optional part: {}/5 pt — not required to pass"


@pytest.fixture
def optional(dojo):
    """The toy kata with an optional part: two optional tests (5 points), `mean` in the reference."""
    dojo.suite.write_text(dojo.suite.read_text() + OPTIONAL_TESTS)
    dojo.reference.write_text(dojo.reference.read_text() + MEAN)
    return dojo


def required_with(dojo, mean: str) -> str:
    """The toy reference's required part with `mean` as given."""
    return dojo.reference.read_text().replace(MEAN, "") + mean


def row(name: str, outcome: str, points: int = 1, optional: bool = False) -> TestResult:
    return TestResult(f"t.py::{name}", name, name, points, False, outcome, optional=optional)


def test_score_leaves_optional_tests_out_of_points_total_and_pass():
    """A failing optional test costs nothing and a passing one earns nothing in the score; a failing
    required test still fails the kata whatever the optional ones do"""
    assert score([row("a", "passed", 2), row("b", "failed", 3, optional=True)], None) == (2, 2, True)
    assert score([row("a", "failed", 2), row("b", "passed", 3, optional=True)], None) == (0, 2, False)
    assert score([row("b", "passed", 3, optional=True)], None)[2] is False, (
        "a kata with only optional tests passing passed: it needs a required test that passed"
    )


def test_failing_optional_part_still_passes_the_check(optional):
    """`dojo check` with every required test passing and the optional part wrong: passed, 6/6 points, the
    optional part 0/5 in its own section with its failure, and results.json's optional_points"""
    optional.write(required_with(optional, WRONG_MEAN))
    out = optional("check", "toy")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if HEADER.format(0) in line)
    score_line = next(i for i, line in enumerate(lines) if line.startswith("Score "))
    assert header < score_line, out.stdout
    assert "FAIL  0/3 pt  mean averages the numbers" in "\n".join(lines[header:score_line]), out.stdout
    assert "mean([1, 2, 6]): got 0, want 3" in out.stdout
    assert "Score 6/6 points · 4/4 tests passing" in out.stdout, out.stdout
    assert "All required tests pass (optional part: 0/5 pt, not needed to pass)" in out.stdout
    doc = json.loads(optional.results().read_text())
    assert (doc["status"], doc["points"], doc["total"]) == ("pass", 6, 6), doc
    assert doc["optional_points"] == {"points": 0, "total": 5}, doc["optional_points"]
    assert sorted(t["name"] for t in doc["tests"] if t["optional"]) == [
        "test_optional_mean",
        "test_optional_mean_of_one",
    ]
    assert optional.attempts() == [("toy", "check", 6, 6, 1)]


def test_an_untouched_optional_part_is_one_quiet_line(optional):
    """An optional function still the stub's NotImplementedError: the header line alone, no FAIL and no
    todo line for it"""
    optional.write(required_with(optional, UNWRITTEN_MEAN))
    out = optional("check", "toy")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if HEADER.format(0) in line)
    assert lines[header + 1].startswith("Score 6/6 points"), out.stdout
    assert "FAIL" not in out.stdout and "todo" not in out.stdout, out.stdout


def test_a_failing_required_test_fails_whatever_the_optional_part_does(optional):
    """The optional part all passing cannot make up for a required test failing"""
    optional.write(optional.reference.read_text().replace("return a + b", "return a - b"))
    out = optional("check", "toy")
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(optional.results().read_text())
    assert doc["status"] == "fail" and doc["optional_points"] == {"points": 5, "total": 5}, doc
    assert HEADER.format(5) in out.stdout and "pass  3/3 pt  mean averages the numbers" in out.stdout


def test_judge_mode_grades_the_optional_part_apart(optional, toy):
    """In judge mode too: passed with the optional part wrong, the judge's optional points apart, and the one
    measured in the candidate's process only in candidate_process_points (a claim not verified)"""
    folder = optional.toy.parent / "submission"
    folder.mkdir()
    (folder / "toy.py").write_text(required_with(optional, WRONG_MEAN))
    result = grade.grade("toy", str(folder), sandboxed=True, timeout=60)
    assert result.judged and result.passed, result.to_json()
    assert (result.points, result.total) == (6, 6), result.to_json()
    assert result.optional_points == (0, 3), result.optional_points
    assert result.candidate_points == (0, 2), result.candidate_points
    flags = {t.name: (t.optional, t.candidate_process) for t in result.tests}
    assert flags["test_optional_mean"] == (True, False) and flags["test_optional_mean_of_one"] == (True, True)
    (folder / "toy.py").write_text(optional.reference.read_text())
    right = grade.grade("toy", str(folder), sandboxed=True, timeout=60)
    assert right.passed and right.to_json()["optional_points"] == {"points": 3, "total": 3}, right.to_json()


def test_takehome_report_carries_optional_points_per_kata(optional, toy):
    """`dojo grade`'s report: each kata's optional_points, and the submission's sum, outside its points"""
    folder = optional.toy.parent / "candidate"
    folder.mkdir()
    (folder / "toy.py").write_text(required_with(optional, WRONG_MEAN))
    doc = takehome.grade_submissions([folder], jobs=1, timeout=60, seed=1)
    sub = doc["submissions"][0]
    assert sub["passed"] and (sub["points"], sub["total"]) == (6, 6), sub
    assert sub["katas"]["toy"]["optional_points"] == {"points": 0, "total": 3}, sub["katas"]["toy"]
    assert sub["optional_points"] == {"points": 0, "total": 3}, sub
