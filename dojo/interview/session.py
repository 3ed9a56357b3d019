"""A mock interview session: its state in the progress database, its clock, its scorecard.

Scoring, and the verdict thresholds:
    code    = hidden-suite points / total (inconclusive tests left out), minus HINT_COST (0.10) per hint, >= 0
    answers = marked rubric points whose answer holds any of their key terms or numbers / points offered
              (a mark without is "self-assessed, not found in the answer"; a blank answer covers none)
    score   = 0.7 * code + 0.3 * answers
    strong hire: >= 0.85, every test passed · hire: >= 0.70 · lean no: >= 0.50 · else no hire; hire and
    above also need answers >= MIN_ANSWERS (0.5): code alone never hires. Nothing here prints or asks.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field

from dojo import catalog
from dojo.catalog import Kata
from dojo.grading import grade
from dojo.interview import bank, evidence
from dojo.practice import history, report, workspace

HINT_COST = 0.10
CODE_WEIGHT, ANSWERS_WEIGHT = 0.7, 0.3
VERDICTS = ((0.85, "strong hire"), (0.70, "hire"), (0.50, "lean no"), (0.0, "no hire"))
MIN_ANSWERS = 0.5  # hire and strong hire need the follow-ups' evidence for half their points, too
KATA_QUESTIONS = 2  # the kata's own follow-ups asked, before one from the bank
RECENT_S = 7 * 24 * 3600  # a kata passed this recently is not picked for an interview


class SessionOpen(RuntimeError):
    """An interview is already in progress."""


def now() -> float:
    """Epoch seconds: $DOJO_FAKE_NOW when set (tests), else the real clock."""
    fake = os.environ.get("DOJO_FAKE_NOW")
    return float(fake) if fake else time.time()


@dataclass
class Session:
    id: int
    kata: str
    started: float
    minutes: float
    timer: bool
    phase: str  # coding | questions | done
    questions: list[dict]  # {"question", "answer", "rubric", "source"}
    check_runs: int = 0
    hints: list[int] = field(default_factory=list)
    submitted: float | None = None
    submitted_by: str | None = None  # "submit" | "time"
    points: int | None = None
    total: int | None = None
    tests: int | None = None
    tests_passed: int | None = None
    inconclusive: int = 0  # timing tests the machine was too noisy to decide: not in tests, points or total

    @property
    def deadline(self) -> float | None:
        return self.started + 60 * self.minutes if self.timer else None

    def remaining(self) -> float | None:
        """Seconds left on the countdown (never below 0); None without a timer."""
        return None if self.deadline is None else max(0.0, self.deadline - now())

    def expired(self) -> bool:
        return self.phase == "coding" and self.deadline is not None and now() >= self.deadline


_COLUMNS = (
    "id, kata, started, minutes, timer, phase, questions, check_runs, hints, submitted, submitted_by,"
    " points, total, tests, tests_passed, inconclusive"
)


def _session(row) -> Session:
    s = Session(*row)
    s.timer, s.questions, s.hints = bool(s.timer), json.loads(s.questions), json.loads(s.hints)
    return s


def get(session_id: int) -> Session:
    with history.connect() as conn:
        return _session(
            conn.execute(f"SELECT {_COLUMNS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        )


def open_session() -> Session | None:
    """The session in progress (coding or questions), or None."""
    with history.connect() as conn:
        row = conn.execute(f"SELECT {_COLUMNS} FROM sessions WHERE phase != 'done'").fetchone()
    return _session(row) if row else None


def pick_kata() -> Kata:
    """The kata to interview on: among katas with a suite whose prerequisites have passed and that
    have not passed in the last week, the weakest best score so far (never tried counts as 0),
    ties in practice order. When none qualifies, the weakest of all."""
    katas = [k for k in catalog.load() if k.has_suite]
    if not katas:
        raise FileNotFoundError("no kata has a test suite yet")
    tries = history.attempts()
    passed = {a.kata for a in tries if a.passed}
    recent = {a.kata for a in tries if a.passed and a.ended > now() - RECENT_S}
    ready = [k for k in katas if k.slug not in recent and all(p in passed for p in k.prerequisites)]
    best = {slug: p.best_points / max(p.best_total, 1) for slug, p in history.progress().items()}
    return min(ready or katas, key=lambda k: (best.get(k.slug, 0.0), k.number))


def begin(
    kata: Kata, *, minutes: float | None = None, timer: bool = True
) -> tuple[Session, workspace.StartResult]:
    """Open a session on `kata`: a fresh stub in the workspace (earlier work backed up), the clock
    started, the follow-up questions chosen. Raises SessionOpen when one is already in progress,
    ValueError for minutes <= 0, FileNotFoundError when the kata has no stub or suite."""
    minutes = kata.minutes if minutes is None else minutes
    if minutes <= 0:
        raise ValueError(f"--minutes must be positive, got {minutes:g}")
    if not kata.has_suite:
        raise FileNotFoundError(f"kata {kata.slug!r} has no tests yet, so it cannot be an interview")
    if open_session() is not None:
        raise SessionOpen("an interview is already in progress")
    started = workspace.reset(kata)
    chosen = [(q, "kata") for q in kata.questions()[:KATA_QUESTIONS]]
    extra = bank.for_kata(kata)
    if extra is not None:
        chosen.append((extra.question, f"bank: {extra.topic}"))
    questions = [
        {"question": q.question, "answer": q.answer, "rubric": q.rubric, "source": src} for q, src in chosen
    ]
    try:
        with history.connect() as conn, history.transaction(conn):
            cur = conn.execute(
                "INSERT INTO sessions (kata, started, minutes, timer, phase, questions) VALUES (?, ?, ?, ?, 'coding', ?)",
                (kata.slug, now(), minutes, int(timer), json.dumps(questions)),
            )
            session_id = int(cur.lastrowid)
    except sqlite3.IntegrityError as exc:  # another process opened one meanwhile
        raise SessionOpen("an interview is already in progress") from exc
    history.record_event(kata.slug, "interview", str(session_id))
    return get(session_id), started


def count_check(s: Session) -> Session:
    with history.connect() as conn, history.transaction(conn):
        conn.execute("UPDATE sessions SET check_runs = check_runs + 1 WHERE id = ?", (s.id,))
    return get(s.id)


def take_hint(s: Session) -> tuple[Session, int | None]:
    """Use the session's next hint (1-based number), or None when all are used. Costs HINT_COST."""
    with history.connect() as conn, history.transaction(conn):
        hints = json.loads(conn.execute("SELECT hints FROM sessions WHERE id = ?", (s.id,)).fetchone()[0])
        if len(hints) >= len(catalog.get(s.kata).hints()):
            return get(s.id), None
        hints.append(len(hints) + 1)
        conn.execute("UPDATE sessions SET hints = ? WHERE id = ?", (json.dumps(hints), s.id))
    history.record_hint(s.kata, hints[-1])
    return get(s.id), hints[-1]


def submit(
    s: Session, *, by: str = "submit", timeout: float | None = None
) -> tuple[Session, grade.GradeResult | None]:
    """Grade the full hidden suite and move to the questions. `by` is "submit" or "time". Only the
    first submission counts: when another process got there first, its session comes back with
    None for the result."""
    result = grade.grade(s.kata, "workspace", timeout=timeout, sandboxed=True)
    report.write_results(result, workspace.results_file(s.kata))
    attempt = history.record_result(result, mode="interview")
    at = min(now(), s.deadline) if by == "time" and s.deadline is not None else now()
    required = [t for t in result.tests if not t.optional]  # an optional part is graded apart
    passed = sum(1 for t in required if t.outcome == "passed")
    unsure = sum(1 for t in required if t.outcome == "inconclusive")
    with history.connect() as conn, history.transaction(conn):
        won = conn.execute(
            "UPDATE sessions SET phase = 'questions', submitted = ?, submitted_by = ?, points = ?, total = ?,"
            " tests = ?, tests_passed = ?, inconclusive = ?, attempt = ? WHERE id = ? AND phase = 'coding'",
            (at, by, result.points, result.total, len(required) - unsure, passed, unsure, attempt, s.id),
        ).rowcount
    if won:  # for the scorecard: an event row, so the sessions table keeps its schema
        detail = {"session": s.id, "sandboxed": result.sandboxed, "findings": result.integrity}
        history.record_event(s.kata, "integrity", json.dumps(detail))
    return get(s.id), (result if won else None)


def answered(s: Session) -> dict[int, dict]:
    """Answers given so far: question number (1-based) -> {"answer", "covered"}."""
    with history.connect() as conn:
        rows = conn.execute(
            "SELECT number, answer, covered FROM session_answers WHERE session = ?", (s.id,)
        ).fetchall()
    return {n: {"answer": a, "covered": json.loads(c)} for n, a, c in rows}


def record_answer(s: Session, number: int, answer: str, covered: list[int]) -> None:
    """Store the answer to question `number` (1-based) and the rubric points (1-based) it covered;
    a blank answer covers none, whatever was marked; an answer already stored is kept."""
    rubric = s.questions[number - 1]["rubric"]
    bad = [c for c in covered if not 1 <= c <= len(rubric)]
    if bad:
        raise ValueError(f"rubric points are numbered 1 to {len(rubric)}, not {bad[0]}")
    if not answer.strip():
        covered = []
    with history.connect() as conn, history.transaction(conn):
        conn.execute(
            "INSERT OR IGNORE INTO session_answers (session, number, question, answer, covered, rubric)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                s.id,
                number,
                s.questions[number - 1]["question"],
                answer,
                json.dumps(sorted(set(covered))),
                len(rubric),
            ),
        )


def verdict(score: float, all_passed: bool, answers: float = 1.0) -> str:
    """The verdict for `score`; strong hire needs every test passed, and any hire `answers` >= MIN_ANSWERS
    (perfect code with nonsense follow-ups is 0.70: without this rule, a hire)."""
    for threshold, name in VERDICTS:
        hires = name in ("strong hire", "hire")
        if (
            score >= threshold
            and (name != "strong hire" or all_passed)
            and (not hires or answers >= MIN_ANSWERS)
        ):
            return name
    return VERDICTS[-1][1]


def marked(rubric: list[str], answer: str, covered: list[int], question: str = "") -> list[dict]:
    """Each point of `rubric` marked in `covered` (1-based), with the evidence `answer` holds for it:
    {"number", "point", "found": its terms the answer contains and the `question` does not (none:
    self-assessed, not found)}."""
    return [
        {"number": n, "point": rubric[n - 1], "found": evidence.found(rubric[n - 1], answer, question)}
        for n in covered
    ]


def scorecard(s: Session) -> dict:
    """The scorecard of a submitted session, from its stored rows."""
    answers = answered(s)
    offered = sum(len(q["rubric"]) for q in s.questions)
    follow_ups = [
        {
            "number": n,
            "marked": marked(
                s.questions[n - 1]["rubric"], a["answer"], a["covered"], s.questions[n - 1]["question"]
            ),
        }
        for n, a in sorted(answers.items())
        if a["answer"].strip()  # blank earns nothing
    ]
    points = [p for f in follow_ups for p in f["marked"]]
    covered = sum(1 for p in points if p["found"])  # a mark the answer shows no sign of earns nothing
    blank = sum(1 for a in answers.values() if not a["answer"].strip())
    code = max(0.0, (s.points or 0) / max(s.total or 0, 1) - HINT_COST * len(s.hints))
    answers_part = covered / offered if offered else 1.0
    score = CODE_WEIGHT * code + ANSWERS_WEIGHT * answers_part
    time_used = (s.submitted or now()) - s.started
    all_passed = bool(s.tests) and s.tests_passed == s.tests
    checked = [json.loads(e[3]) for e in history.events(s.kata, "integrity")]
    mine = next((c for c in checked if c["session"] == s.id), {"sandboxed": False, "findings": []})
    return {
        "session": s.id,
        "kata": s.kata,
        "started": s.started,
        "minutes": s.minutes,
        "timer": s.timer,
        "time_used_s": round(time_used, 1),
        "submitted_by": s.submitted_by,
        "tests_passed": s.tests_passed,
        "tests": s.tests,
        "points": s.points,
        "total": s.total,
        "inconclusive": s.inconclusive,
        "check_runs": s.check_runs,
        "hints": len(s.hints),
        "hint_cost": round(HINT_COST * len(s.hints), 2),
        "rubric_covered": covered,
        "rubric_offered": offered,
        "rubric_marked": len(points),
        "self_assessed": sum(1 for p in points if not p["found"]),  # marked, no evidence in the answer
        "blank_answers": blank,
        "follow_ups": follow_ups,
        "code": round(code, 3),
        "answers": round(answers_part, 3),
        "score": round(score, 3),
        "verdict": verdict(score, all_passed, answers_part),
        "sandboxed": mine["sandboxed"],
        "integrity": mine["findings"],  # for the interviewer to judge
    }


def finish(s: Session) -> dict:
    """Write the scorecard and close the session; returns the card. Written exactly once: a second
    call (or a second process) gets the card already stored."""
    card = scorecard(s)
    with history.connect() as conn, history.transaction(conn):
        conn.execute(
            "INSERT OR IGNORE INTO scorecards (session, kata, written, score, verdict, card) VALUES (?, ?, ?, ?, ?, ?)",
            (s.id, s.kata, now(), card["score"], card["verdict"], json.dumps(card)),
        )
        conn.execute("UPDATE sessions SET phase = 'done' WHERE id = ?", (s.id,))
        stored = conn.execute("SELECT card FROM scorecards WHERE session = ?", (s.id,)).fetchone()[0]
    return json.loads(stored)


def scorecards(kata: str | None = None) -> list[dict]:
    """Every scorecard, oldest first, for one kata or all."""
    sql, args = "SELECT card FROM scorecards", ()
    if kata is not None:
        sql, args = sql + " WHERE kata = ?", (kata,)
    with history.connect() as conn:
        return [json.loads(r[0]) for r in conn.execute(sql + " ORDER BY written, id", args)]


@dataclass(frozen=True)
class Trend:
    kata: str
    scores: list[float]  # oldest first
    verdicts: list[str]
    best_practice: tuple[int, int] | None  # best (points, total) outside interviews


def trends() -> tuple[list[Trend], str | None]:
    """Per-kata interview scores over time, and the kata to redo next: among katas interviewed
    before, the one whose latest interview scored lowest, when below "hire" (None: no such kata;
    a kata never interviewed is never "redo")."""
    cards = scorecards()
    progress = history.progress()
    out = []
    for kata in catalog.load():
        mine = [c for c in cards if c["kata"] == kata.slug]
        p = progress.get(kata.slug)
        if mine or (p and p.attempts):
            best = (p.best_points, p.best_total) if p and p.attempts else None
            out.append(Trend(kata.slug, [c["score"] for c in mine], [c["verdict"] for c in mine], best))
    weak = sorted((t.scores[-1], t.kata) for t in out if t.scores and t.scores[-1] < VERDICTS[1][0])
    return out, (weak[0][1] if weak else None)
