"""After and around a mock interview: `dojo history N`, `dojo stats`' redo suggestion, and what the
interview keeps closed (the reference, and any pointer to it).

Driven as in test_interview.py: `python -m dojo` in the toy workspace, scripted stdin, a fake clock.
"""

from __future__ import annotations

import shutil

import pytest
from test_interview import T0, run, solve

from dojo import KATAS_DIR


@pytest.fixture
def dojo(dojo):
    shutil.copy(KATAS_DIR / "BANK.md", dojo.toy / "katas" / "BANK.md")
    return dojo


def _interview(dojo, answers: str, at: float = T0) -> None:
    run(dojo, "interview", "toy", at=at)
    solve(dojo)
    out = run(dojo, "submit", at=at + 60, stdin=answers)
    assert out.returncode == 0, out.stdout + out.stderr


def test_history_n_shows_a_scorecard_in_full(dojo):
    """`dojo history 1` prints that session's whole scorecard, its lines' values in one column, and what
    each follow-up earned; an N out of range is a usage error"""
    _interview(dojo, "punctuation is kept, and a regex strips it\n.\nall\n.\n")
    out = run(dojo, "history", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    top = lines[: next(i for i, line in enumerate(lines) if line.startswith("Thresholds"))]
    card = [line for line in top if line.startswith("  ") and ":" in line]
    names = (
        "Tests passed",
        "Points",
        "Time used",
        "Check runs",
        "Hints",
        "Rubric coverage",
        "Score",
        "Verdict",
        "Integrity",
        "Sandboxed",
    )
    assert [line.split(":")[0].strip() for line in card] == list(names)
    assert len({line.index(line.split(":", 1)[1].strip()) for line in card}) == 1, "values not in one column"
    assert "Rubric coverage: 2/8 (1 blank answer(s): no points, whatever was marked)" in out.stdout
    assert "  Q1.2 suggests a regex to strip it\n       found: regex, strip" in out.stdout
    follow = [line for line in lines[lines.index("Follow-ups") :] if line.startswith("  Q")]
    assert follow[0].split()[:2] == ["Q1", "2/2"] and follow[1].split()[:2] == ["Q2", "blank"]
    out = run(dojo, "history", "2")
    assert out.returncode == 2 and "no interview 2" in out.stderr


def test_stats_suggests_redoing_only_interviewed_katas(dojo):
    """with no interview yet, or only good ones, stats suggests no redo; a weak interview is the redo"""
    dojo.write("def add(a, b):\n    return a + b\n")
    run(dojo, "check", "toy")
    assert "Redo next" not in run(dojo, "stats").stdout
    _interview(dojo, "a\n.\nall\nb\n.\nall\n")
    out = run(dojo, "stats")
    assert "Redo next" not in out.stdout and "Nothing to redo" in out.stdout
    run(dojo, "interview", "toy", at=T0 + 1000)
    run(dojo, "submit", at=T0 + 1060, stdin=".\n.\n")  # the stub, no answers: no hire
    assert "Redo next: toy (`dojo interview toy`)" in run(dojo, "stats").stdout


def test_the_reference_stays_closed_until_the_scorecard(dojo):
    """while an interview is open (coding or questions), `dojo solution` is refused for every kata, and a
    passing `dojo check` does not point to it"""
    run(dojo, "interview", "toy")
    out = run(dojo, "solution", "toy", "--force", at=T0 + 10)
    assert out.returncode == 2 and "Not during an interview" in out.stdout
    solve(dojo)
    run(dojo, "submit", at=T0 + 60, stdin="")  # graded; the questions wait
    out = run(dojo, "check", "toy", at=T0 + 70)
    assert out.returncode == 0 and "All tests pass" in out.stdout and "dojo solution" not in out.stdout, (
        out.stdout
    )
    out = run(dojo, "solution", "toy", at=T0 + 80)
    assert out.returncode == 2 and "follow-up questions come first" in out.stdout
    run(dojo, "interview", "--resume", at=T0 + 90, stdin="a\n.\n1\nb\n.\n1\n")
    out = run(dojo, "check", "toy", at=T0 + 100)
    assert "`dojo solution toy` shows the reference" in out.stdout  # the interview is over
