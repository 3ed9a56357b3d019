"""Mock interviews end to end: `python -m dojo` as a subprocess, scripted stdin, a fake clock.

The toy kata (tests/dojo/toy, via the `dojo` fixture) keeps grading fast; the real question bank
is copied beside it. $DOJO_FAKE_NOW is the clock dojo.interview.session reads, so time is moved, not waited.
"""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dojo import KATAS_DIR, ROOT, catalog
from dojo.interview import evidence
from dojo.practice import history

T0 = 1_800_000_000.0  # the fake clock's start
# answers holding every rubric point's key terms, marked "all": the toy's question, then the bank's (tokenization)
COVERED = (
    "punctuation is kept; a regex strips it\n.\nall\n"
    "bytes, overlaps, ties by rank, a heap, regex chunks, special tokens\n.\nall\n"
)
NONSENSE = "banana banana the GPU is purple, 42 requests because giraffes."


@pytest.fixture
def dojo(dojo):
    shutil.copy(KATAS_DIR / "BANK.md", dojo.toy / "katas" / "BANK.md")
    return dojo


def run(dojo, *args: str, at: float = T0, stdin: str = "") -> subprocess.CompletedProcess:
    """`dojo ARGS` at fake time `at`, with `stdin` as its input."""
    env = {**dojo.env, "DOJO_FAKE_NOW": str(at)}
    return subprocess.run(
        [sys.executable, "-m", "dojo", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def rows(dojo, sql: str) -> list[tuple]:
    with sqlite3.connect(dojo.db) as conn:
        return conn.execute(sql).fetchall()


def solve(dojo) -> None:
    shutil.copy(dojo.reference, dojo.file())


def test_full_session(dojo):
    """interview picks the kata and shows prompt and rules; check runs only examples, counted; submit grades
    everything, asks the kata's follow-up and one from the bank, and writes a scorecard; history and stats show it"""
    out = run(dojo, "interview")  # no slug: the weakest kata with a suite, toy
    assert out.returncode == 0, out.stderr
    assert "Mock interview: toy" in out.stdout and "Implement add(a, b)" in out.stdout
    assert "only the README's worked examples" in out.stdout and "Time left: 5:00 of 5 min" in out.stdout
    assert "raise NotImplementedError" in dojo.file().read_text()

    out = run(dojo, "check", at=T0 + 30)
    assert out.returncode == 1 and "README examples only" in out.stdout and "check run 1" in out.stdout
    assert "add works for negative numbers" not in out.stdout  # a hidden test: not shown before submission
    solve(dojo)
    out = run(dojo, "check", at=T0 + 60)
    assert out.returncode == 0 and "check run 2" in out.stdout and "Time left: 4:00" in out.stdout
    for hidden in (("watch",), ("solution", "toy")):
        out = run(dojo, *hidden, at=T0 + 61)
        assert out.returncode == 2 and "Not during an interview" in out.stdout
    out = run(dojo, "status", at=T0 + 90)
    assert "Interview in progress: toy. Time left: 3:30 of 5 min. Check runs: 2, hints: 0" in out.stdout

    out = run(
        dojo,
        "submit",
        at=T0 + 120,
        stdin="it keeps punctuation\n.\n1\nbytes, overlaps, a heap, regex splits\n.\n1 2 4 5\n",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "add works for negative numbers" in out.stdout and "Score 6/6 points" in out.stdout
    assert "Question 1 of 2 (kata)" in out.stdout and "Question 2 of 2 (bank: tokenization)" in out.stdout
    assert (
        "It keeps it:" in out.stdout and "1. says punctuation is kept" in out.stdout
    )  # model answer, rubric
    for line in (
        "Tests passed:    4/4",
        "Points:          6/6",
        "Time used:       2.0 min of 5",
        "Check runs:      2",
        "Hints:           0",
        "Rubric coverage: 5/8",
        "Score:           89%",
        "Verdict:         strong hire",
    ):
        assert line in out.stdout, f"scorecard lacks {line!r}:\n{out.stdout}"
    assert ("toy", "examples") in {a[:2] for a in dojo.attempts()} and dojo.attempts()[-1][:2] == (
        "toy",
        "interview",
    )
    assert rows(dojo, "SELECT verdict FROM scorecards") == [("strong hire",)]

    out = run(dojo, "history")
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()[:2]
    assert header.split() == [
        "#",
        "when",
        "kata",
        "points",
        "time",
        "checks",
        "hints",
        "rubric",
        "score",
        "verdict",
        "integrity",
    ]
    assert row.split()[:1] + row.split()[3:] == [
        "1",
        "toy",
        "6/6",
        "2.0",
        "min",
        "2",
        "0",
        "5/8",
        "89%",
        "strong",
        "hire",
        "-",
    ]
    out = run(dojo, "stats")
    assert (
        out.returncode == 0
        and "interviews: 89% (last: strong hire)" in out.stdout
        and "best check 6/6" in out.stdout
    )


def test_resume_after_the_process_is_killed(dojo):
    """a session survives a killed terminal: --resume shows the clock while coding, and continues at the
    first unmarked question after a kill during the questions"""
    run(dojo, "interview", "toy", "--minutes", "20")
    out = run(dojo, "interview", "--resume", at=T0 + 600)
    assert out.returncode == 0 and "Time left: 10:00 of 20 min" in out.stdout
    out = run(dojo, "interview", "toy", at=T0 + 601)
    assert out.returncode == 2 and "in progress" in out.stdout  # one session at a time
    solve(dojo)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dojo", "submit"],
        env={**dojo.env, "DOJO_FAKE_NOW": str(T0 + 700)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        proc.stdin.write("punctuation is kept, a regex strips it\n.\nall\n")
        proc.stdin.flush()
        for line in proc.stdout:
            if line.startswith("Question 2 of 2"):
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        watchdog.cancel()
    assert rows(dojo, "SELECT number, covered FROM session_answers") == [(1, "[1, 2]")]
    assert rows(dojo, "SELECT COUNT(*) FROM scorecards") == [(0,)]
    assert "follow-up questions next: `dojo interview --resume`" in run(dojo, "status", at=T0 + 750).stdout

    out = run(dojo, "interview", "--resume", at=T0 + 800, stdin="bytes\n.\n\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Question 1 of 2" not in out.stdout and "Question 2 of 2" in out.stdout
    assert "Rubric coverage: 2/8" in out.stdout and "Time used:       11.7 min of 20" in out.stdout


def test_submission_at_time_out(dojo):
    """once the time is up the next command grades the full suite as it stands; the card says so"""
    run(dojo, "interview", "toy", "--minutes", "5")
    dojo.write("def add(a, b):\n    return a + b\n\ndef count_words(text):\n    return {}\n")
    out = run(dojo, "check", at=T0 + 301)
    assert out.returncode == 1 and "Time is up (5 min)" in out.stdout
    assert (
        "add works for negative numbers" in out.stdout and "Score 3/6 points" in out.stdout
    )  # the full suite
    assert "dojo interview --resume" in out.stdout
    out = run(dojo, "check", at=T0 + 302)  # submitted already: an ordinary check now
    assert "Time is up" not in out.stdout
    out = run(dojo, "interview", "--resume", at=T0 + 900, stdin=COVERED)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "Time used:       5.0 min of 5 (time ran out)" in out.stdout and "Points:          3/6" in out.stdout
    )
    assert "Score:           65%" in out.stdout and "Verdict:         lean no" in out.stdout
    assert rows(dojo, "SELECT submitted_by FROM sessions") == [("time",)]


def test_no_timer_never_runs_out(dojo):
    """--no-timer: no countdown, and no time-out however late"""
    run(dojo, "interview", "toy", "--no-timer")
    out = run(dojo, "check", at=T0 + 86_400)
    assert "No timer." in out.stdout and "Time is up" not in out.stdout


def test_hints_cost_points(dojo):
    """each hint in a session is shown in order, recorded, and costs 10% of the code score"""
    run(dojo, "interview", "toy")
    out = run(dojo, "hint")
    assert (
        "Hint 1 of 2 (costs 10% of your code score; 1 used)" in out.stdout
        and "Addition is built in." in out.stdout
    )
    assert "Hint 2 of 2" in run(dojo, "hint").stdout
    assert "All 2 hints used" in run(dojo, "hint").stdout
    solve(dojo)
    out = run(dojo, "submit", at=T0 + 60, stdin=COVERED)
    assert "Hints:           2 (-20% of the code score)" in out.stdout
    assert (
        "Score:           86%" in out.stdout and "Verdict:         strong hire" in out.stdout
    )  # 0.7 x 0.8 + 0.3 x 1
    assert rows(dojo, "SELECT hints FROM sessions") == [("[1, 2]",)]


def test_self_marked_nonsense_is_not_full_marks(dojo):
    """an answer holding none of a point's key terms or numbers, marked "all", earns none of its points, and
    the scorecard shows each one as "self-assessed, not found in the answer"; answers that hold the terms,
    marked "all", keep full marks"""
    run(dojo, "interview", "toy")
    solve(dojo)
    out = run(dojo, "submit", at=T0 + 60, stdin=f"{NONSENSE}\n.\nall\n{NONSENSE}\n.\nall\n")
    assert out.returncode == 0, out.stdout + out.stderr
    said = "self-assessed, not found in the answer"
    assert f"Rubric coverage: 0/8 (8 marked point(s) {said}: no credit)" in out.stdout, out.stdout
    assert f"Q1.1 says punctuation is kept\n       {said} (no credit)" in out.stdout, out.stdout
    assert out.stdout.count(f"{said} (no credit)") == 8
    # the code alone scores 70%, but code alone never hires
    assert "Score:           70%" in out.stdout and "Verdict:         lean no" in out.stdout
    card = json.loads(rows(dojo, "SELECT card FROM scorecards")[-1][0])
    assert (card["rubric_covered"], card["self_assessed"], card["answers"]) == (0, 8, 0.0)

    run(dojo, "interview", "toy", at=T0 + 1000)
    solve(dojo)
    out = run(dojo, "submit", at=T0 + 1060, stdin=COVERED)
    assert "Rubric coverage: 8/8\n" in out.stdout and said not in out.stdout, out.stdout
    assert "Q1.2 suggests a regex to strip it\n       found: regex, strip" in out.stdout, out.stdout


def test_scorecard_written_exactly_once(dojo):
    """a finished session cannot be resumed or scored again, and the database refuses a second card"""
    run(dojo, "interview", "toy")
    solve(dojo)
    run(dojo, "submit", stdin="a\n.\n1\nb\n.\n1\n")
    out = run(dojo, "interview", "--resume")
    assert out.returncode == 1 and "No interview in progress" in out.stdout
    assert run(dojo, "submit").returncode == 1
    assert rows(dojo, "SELECT COUNT(*) FROM scorecards") == [(1,)]
    with sqlite3.connect(dojo.db) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO scorecards (session, kata, written, score, verdict, card) SELECT session, kata,"
            " written, score, verdict, card FROM scorecards"
        )


def test_schema_migration_keeps_practice_history(dojo):
    """a version-1 progress database gains the interview tables and keeps its attempts"""
    dojo.db.parent.mkdir(parents=True)
    with sqlite3.connect(dojo.db) as conn:
        for statement in history.MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO attempts (kata, mode, target, started, ended, points, total, passed, tests, failed)"
            " VALUES ('toy', 'check', 'workspace', 1, 2, 6, 6, 1, 4, 0)"
        )
        conn.execute("PRAGMA user_version = 1")
    assert run(dojo, "history").stdout.startswith("No interviews yet")
    assert rows(dojo, "PRAGMA user_version") == [(history.SCHEMA_VERSION,)]
    assert dojo.attempts() == [("toy", "check", 6, 6, 1)]


def test_interviewer_packet_for_bpe():
    """`dojo interviewer bpe`: prompt, approach, hints with timing, follow-ups with rubric, and every
    mutant's mistake"""
    out = subprocess.run(
        [sys.executable, "-m", "dojo", "interviewer", "bpe"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_env(), "NO_COLOR": "1"},
        check=False,
    )
    assert out.returncode == 0, out.stderr
    for heading in (
        "Prompt",
        "Expected approach",
        "Hints to give, and when",
        "Follow-up questions",
        "Common mistakes",
        "Scoring",
    ):
        assert f"== {heading}" in out.stdout
    assert "Hint 1 (around minute" in out.stdout and "Rubric:" in out.stdout
    point = (
        catalog.get("bpe").questions()[0].rubric[0]
    )  # each rubric point, then what the scorecard looks for
    shown = ", ".join(t.text for t in evidence.terms(point))
    assert f"  - {point}\n    evidence: {shown}" in out.stdout, out.stdout
    mutants = sorted((ROOT / "tests" / "katas" / "mutants" / "bpe").glob("*.py"))
    assert mutants
    for path in mutants:
        first = _docstring_line(path)
        assert f"- {first}" in out.stdout, f"mistake of {path.name} missing"


def test_ask_drills_the_bank(dojo):
    """`dojo ask TOPIC` asks a bank question on it, shows model answer and rubric, records the drill, and asks
    the least-drilled one next; an unknown topic lists the topics"""
    out = run(dojo, "ask", "roofline", stdin="ridge point\n.\n1 3\n")
    assert out.returncode == 0, out.stderr
    assert "Bank question (roofline)" in out.stdout and "Model answer." in out.stdout
    assert "Covered 2 of 5 rubric points" in out.stdout
    first = out.stdout.splitlines()[1]
    second = run(dojo, "ask", "roofline").stdout.splitlines()[
        1
    ]  # no input: answer and rubric shown, nothing marked
    assert first != second and second.startswith("How would you show")
    out = run(dojo, "ask", "astrology")
    assert out.returncode != 0 and "topics are" in out.stderr and "tokenization" in out.stderr


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("DOJO_KATAS_DIR", "DOJO_FAKE_NOW")}


def _docstring_line(path: Path) -> str:
    import ast

    return ast.get_docstring(ast.parse(path.read_text())).strip().splitlines()[0]


def test_scorecard_shows_integrity_findings(dojo):
    """a submission that passes but reaches for the grader: the points stand, the scorecard lists the
    finding with its line for the interviewer, and says whether the grading was sandboxed"""
    run(dojo, "interview", "toy")
    dojo.write("import atexit\n" + dojo.reference.read_text())
    out = run(dojo, "submit", at=T0 + 60, stdin="a\n.\n1\nb\n.\n1\n")
    assert "Score 6/6 points" in out.stdout, out.stdout + out.stderr
    assert "Integrity:       1 finding(s), for the interviewer to judge" in out.stdout
    assert "toy.py:1: imports atexit (runs code as the process ends)" in out.stdout
    assert "Sandboxed:" in out.stdout
    assert "1 finding(s)" in run(dojo, "history").stdout
    card = json.loads(rows(dojo, "SELECT card FROM scorecards")[-1][0])
    assert card["integrity"] == ["toy.py:1: imports atexit (runs code as the process ends)"]


def test_interview_says_the_stub_replaced_earlier_work(dojo):
    """an interview over a solved workspace file says it now holds the stub and where the earlier work went"""
    dojo.file().parent.mkdir(parents=True, exist_ok=True)
    solve(dojo)
    solved = dojo.file().read_text()
    out = run(dojo, "interview", "toy")
    assert out.returncode == 0, out.stderr
    said = " ".join(out.stdout.split())
    assert f"The interview starts from the stub: {dojo.file()} now holds it." in said, out.stdout
    backup = Path(said.split("backed up at ", 1)[1].split(" ", 1)[0])
    assert backup.read_text() == solved and "raise NotImplementedError" in dojo.file().read_text()


def test_code_alone_never_hires():
    """Perfect code with follow-ups that show no evidence scores 0.70, a hire by score alone: the verdict
    needs the answers' half too, so it reads lean no; with the answers there it hires as before."""
    from dojo.interview.session import verdict

    assert verdict(0.70, True, answers=0.0) == "lean no"
    assert verdict(0.85, True, answers=0.49) == "lean no"
    assert verdict(0.70, True, answers=0.5) == "hire"
    assert verdict(0.95, True, answers=0.9) == "strong hire" and verdict(0.95, False, answers=0.9) == "hire"
