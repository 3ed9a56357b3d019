"""Mock interviews: `dojo interview`, `submit`, `history`, `stats` (`interviewer`, `ask`: dojo.interview.ask).

Printing and asking only: state, clock and scoring are dojo.interview.session's, the questions
dojo.interview.bank's. `during_session(command, args)` is the hook dojo.cli calls while an interview is
open: `dojo check` runs only the README examples, `dojo hint` costs points, `dojo watch` and `dojo
solution` are refused, and a command after the time is up submits the file.
"""

from __future__ import annotations

import time

from rich.markup import escape
from rich.table import Table

from dojo import catalog
from dojo.errors import UsageError
from dojo.interview import answer, session
from dojo.interview.ask import (
    NOT_FOUND,
    cmd_ask,
    cmd_interviewer,
    mark,
    show_answer,
    show_marked,
    show_model_answer,
)
from dojo.interview.session import Session
from dojo.practice import check, history, prose, report, workspace

RULES = (
    "Rules: edit {path}. `dojo check` runs only the README's worked examples, and every run is counted. "
    "`dojo hint` is allowed; each hint costs {cost:.0%} of your code score. `dojo status` shows the time left. "
    "`dojo submit` (or the time running out) grades the full hidden suite; then come {n} follow-up questions. "
    "Closed the terminal? `dojo interview --resume`."
)

NO_SESSION = "No interview in progress: `dojo interview [kata]` starts one."


def register(subparsers) -> None:
    p = subparsers.add_parser("interview", help="a timed mock interview on one kata")
    p.add_argument("slug", nargs="?", help="kata (default: your weakest not passed recently)")
    p.add_argument("--minutes", type=float, default=None, help="the time box (default: the kata's minutes)")
    p.add_argument("--no-timer", action="store_true", help="no countdown")
    p.add_argument("--resume", action="store_true", help="continue the interview in progress")
    p.set_defaults(func=cmd_interview)
    subparsers.add_parser(
        "submit", help="hand in the interview's kata: full grading, then questions"
    ).set_defaults(func=cmd_submit)
    p = subparsers.add_parser("interviewer", help="the interviewer's packet for a two-person mock interview")
    p.add_argument("slug")
    p.set_defaults(func=cmd_interviewer)
    p = subparsers.add_parser("history", help="past interviews; with N, scorecard N in full")
    p.add_argument("number", nargs="?", type=int, metavar="N", help="a session's number in the list")
    p.set_defaults(func=cmd_history)
    subparsers.add_parser("stats", help="per-kata trends and what to redo next").set_defaults(func=cmd_stats)
    p = subparsers.add_parser("ask", help="drill a question from the question bank")
    p.add_argument("topic", nargs="?", help="a topic, e.g. roofline (default: any)")
    p.set_defaults(func=cmd_ask)


# ---- the session -------------------------------------------------------------------------------


def cmd_interview(args) -> int:
    out = report.console()
    s = session.open_session()
    if args.resume:
        if s is None:
            out.print(NO_SESSION, markup=False)
            return 1
        return _resume(s, out)
    if s is not None:
        out.print(
            f"An interview on {s.kata} is in progress: `dojo interview --resume` continues it, `dojo submit` hands it in."
        )
        return 2
    kata = catalog.get(args.slug) if args.slug else session.pick_kata()
    s, started = session.begin(kata, minutes=args.minutes, timer=not args.no_timer)
    out.print(f"[bold]Mock interview: {kata.slug}[/bold] ({escape(kata.title)})")
    prose.show(out, kata.readme())
    if started.backup:  # said after the prompt, which may scroll or page past anything printed before it
        out.print(
            f"The interview starts from the stub: {started.path} now holds it. Your earlier work there is "
            f"backed up at {started.backup} (copy it back after the interview).",
            markup=False,
        )
    out.print(RULES.format(path=started.path, cost=session.HINT_COST, n=len(s.questions)), markup=False)
    out.print(_clock(s), markup=False)
    return 0


def _resume(s: Session, out) -> int:
    if s.phase == "coding":
        if s.expired():
            return _time_up(s, out, ask=True)
        out.print(f"Interview on {s.kata} resumed. {_clock(s)}", markup=False)
        out.print(RULES.format(path=_file(s), cost=session.HINT_COST, n=len(s.questions)), markup=False)
        return 0
    return _questions(s, out)


def cmd_submit(args) -> int:
    out = report.console()
    s = session.open_session()
    if s is None:
        out.print(NO_SESSION, markup=False)
        return 1
    if s.phase == "coding":
        s = _submit(s, out, by="time" if s.expired() else "submit")
    return _questions(s, out)


def _submit(s: Session, out, *, by: str) -> Session:
    if by == "time":
        out.print(f"Time is up ({s.minutes:g} min): {_file(s)} is graded as it stands.", markup=False)
    with report.working(out, f"Grading {s.kata} on the full hidden suite, sandboxed"):
        s, result = session.submit(s, by=by)
    if result is not None:
        report.show_result(result, out, title=catalog.get(s.kata).title)
    return s


def _time_up(s: Session, out, *, ask: bool) -> int:
    s = _submit(s, out, by="time")
    if ask:
        return _questions(s, out)
    out.print("Follow-up questions next: `dojo interview --resume`.")
    return 1


def _questions(s: Session, out) -> int:
    """Ask every unanswered follow-up, then write and show the scorecard. Stops (exit 1) at end of input."""
    done = session.answered(s)
    for number, q in enumerate(s.questions, start=1):
        if number in done:
            continue
        out.print(f"\n[bold]Question {number} of {len(s.questions)}[/bold] ({escape(q['source'])})")
        prose.show(out, q["question"], page=False)
        try:
            given = answer.read_answer(q["question"])
            show_answer(out, given)
            show_model_answer(out, q["answer"], q["rubric"])
            covered = mark(out, given, len(q["rubric"]))
        except EOFError:
            out.print(
                f"\nStopped before question {number} was marked: `dojo interview --resume` continues there."
            )
            return 1
        session.record_answer(s, number, given, covered)
    show_card(session.finish(session.get(s.id)), out)
    return 0


def show_card(card: dict, out) -> None:
    out.print(f"\n[bold]Scorecard: {card['kata']}[/bold]")
    used = f"{card['time_used_s'] / 60:.1f} min" + (f" of {card['minutes']:g}" if card["timer"] else "")
    if card["submitted_by"] == "time":
        used += " (time ran out)"
    lines = [
        (
            "Tests passed",
            f"{card['tests_passed']}/{card['tests']}"
            + (
                f" ({card['inconclusive']} timing tests inconclusive on a busy machine: not counted)"
                if card.get("inconclusive")
                else ""
            ),
        ),
        ("Points", f"{card['points']}/{card['total']}"),
        ("Time used", used),
        ("Check runs", str(card["check_runs"])),
        ("Hints", f"{card['hints']} (-{card['hint_cost']:.0%} of the code score)" if card["hints"] else "0"),
        ("Rubric coverage", f"{card['rubric_covered']}/{card['rubric_offered']}" + _coverage_notes(card)),
        (
            "Score",
            (
                f"{card['score']:.0%} (code {card['code']:.0%} x {session.CODE_WEIGHT:g} + "
                f"answers {card['answers']:.0%} x {session.ANSWERS_WEIGHT:g})"
            ),
        ),
        ("Verdict", card["verdict"]),
        (
            "Integrity",
            f"{len(card.get('integrity', []))} finding(s), for the interviewer to judge"
            if card.get("integrity")
            else "no findings",
        ),
        ("Sandboxed", "yes" if card.get("sandboxed") else "no"),
    ]
    for name, value in lines:
        out.print(f"  {name + ':':<17}{value}", markup=False)
    for finding in card.get("integrity", []):
        out.print(f"    {finding}", markup=False)
    out.print(
        "Thresholds: strong hire >= 85% with every test passing, hire >= 70%, lean no >= 50%, no hire below."
    )
    if any(f["marked"] for f in card.get("follow_ups", [])):  # cards written before evidence have none
        out.print("Rubric points marked, and the evidence in the answer:")
        for f in card["follow_ups"]:
            show_marked(out, f["marked"], question=f["number"])


def _coverage_notes(card: dict) -> str:
    """What the coverage figure leaves out: blank answers, and marked points the answers show no sign of."""
    notes = []
    if card.get("blank_answers"):
        notes.append(f"{card['blank_answers']} blank answer(s): no points, whatever was marked")
    if card.get("self_assessed"):
        notes.append(f"{card['self_assessed']} marked point(s) {NOT_FOUND}: no credit")
    return f" ({'; '.join(notes)})" if notes else ""


def _clock(s: Session) -> str:
    left = s.remaining()
    if left is None:
        return "No timer."
    return f"Time left: {int(left // 60)}:{int(left % 60):02d} of {s.minutes:g} min."


def _file(s: Session) -> str:
    return str(workspace.kata_file(s.kata))


def during_session(command: str, args) -> int | None:
    """The interview's rules for `command` (one of dojo.cli.INTERVIEW_RULED: check, hint, watch, solution,
    status) while an interview is open: an exit code when the interview handled the command, None when
    the command should run as usual."""
    s = session.open_session()
    if s is None:
        return None
    if command == "solution":
        then = (
            "`dojo check` runs the README examples; `dojo submit` hands in."
            if s.phase == "coding"
            else "The follow-up questions come first: `dojo interview --resume`."
        )
        report.console().print(
            f"Not during an interview: `dojo solution` opens once the scorecard is written. {then}",
            markup=False,
        )
        return 2
    args.interview_open = True  # for the commands that run as usual: no pointers to the reference
    if getattr(args, "slug", None) not in (None, s.kata):
        return None
    if s.phase != "coding":
        if command == "status":
            report.console().print(
                f"Interview on {s.kata}: submitted; follow-up questions next: `dojo interview --resume`."
            )
        return None
    if getattr(args, "notebook", None) is not None:
        return None
    out = report.console()
    if s.expired():
        return _time_up(s, out, ask=False)
    if command == "check":
        result = check.check(s.kata, examples_only=True, timeout=args.timeout)
        s = session.count_check(s)
        report.show_result(result, out, title=catalog.get(s.kata).title)
        out.print(
            f"Interview: README examples only (check run {s.check_runs}). {_clock(s)} `dojo submit` when done.",
            markup=False,
        )
        return 0 if result.passed else 1
    if command == "hint":
        s, n = session.take_hint(s)
        hints = catalog.get(s.kata).hints()
        if n is None:
            out.print(f"All {len(hints)} hints used.")
            return 0
        out.print(
            f"[bold]Hint {n} of {len(hints)}[/bold] (costs {session.HINT_COST:.0%} of your code score; "
            f"{len(s.hints)} used)"
        )
        prose.show(out, hints[n - 1])
        return 0
    if command == "watch":
        out.print(
            "Not during an interview: `dojo watch` would show what the interview hides. "
            "`dojo check` runs the README examples; `dojo submit` hands in."
        )
        return 2
    if command == "status":
        out.print(
            f"Interview in progress: {s.kata}. {_clock(s)} Check runs: {s.check_runs}, hints: {len(s.hints)}. "
            "`dojo submit` when done.",
            markup=False,
        )
        return 0
    return None


# ---- outside a session -------------------------------------------------------------------------


def cmd_history(args) -> int:
    out = report.console()
    cards = session.scorecards()
    if not cards:
        out.print("No interviews yet: `dojo interview` starts one.")
        return 0
    if args.number is not None:
        if not 1 <= args.number <= len(cards):
            raise UsageError(f"no interview {args.number}: `dojo history` numbers them 1 to {len(cards)}")
        card = cards[args.number - 1]
        out.print(f"Interview {args.number} of {len(cards)}, {_when(card['started'])}", markup=False)
        show_card(card, out)
        _show_answers(card, out)
        return 0
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in (
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
    ):
        table.add_column(
            column, justify="right" if column in ("#", "time", "checks", "hints", "score") else "left"
        )
    for n, c in enumerate(cards, start=1):
        found = len(c.get("integrity", []))
        table.add_row(
            str(n),
            _when(c["started"]),
            c["kata"],
            f"{c['points']}/{c['total']}",
            f"{c['time_used_s'] / 60:.1f} min",
            str(c["check_runs"]),
            str(c["hints"]),
            f"{c['rubric_covered']}/{c['rubric_offered']}",
            f"{c['score']:.0%}",
            c["verdict"],
            f"{found} finding(s)" if found else "-",
        )
    out.print(table, markup=False)
    out.print("`dojo history N` shows scorecard N in full.")
    return 0


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))


def _show_answers(card: dict, out) -> None:
    """Each follow-up of the card's session: the rubric points the answer covered, and the question."""
    s = session.get(card["session"])
    given = session.answered(s)
    out.print("[bold]Follow-ups[/bold]")
    for number, q in enumerate(s.questions, start=1):
        a = given.get(number)
        mark = (
            "blank"
            if a is not None and not a["answer"].strip()
            else f"{len(a['covered'])}/{len(q['rubric'])}"
            if a is not None
            else "unanswered"
        )
        out.print(f"  Q{number:<3}{mark:<11}{q['question']}", markup=False)


def cmd_stats(args) -> int:
    out = report.console()
    rows, redo = session.trends()
    revealed = history.revealed()
    if not rows:
        out.print("Nothing yet: `dojo start <kata>` or `dojo interview` to begin.")
    for t in rows:
        scores = " -> ".join(f"{s:.0%}" for s in t.scores) or "no interview"
        practice = (
            f"best check {t.best_practice[0]}/{t.best_practice[1]}" if t.best_practice else "no check yet"
        ) + ("; reference revealed before a pass" if t.kata in revealed else "")
        last = f" (last: {t.verdicts[-1]})" if t.verdicts else ""
        out.print(f"{t.kata:<16} interviews: {scores}{last}; {practice}", markup=False)
    if redo:
        out.print(f"Redo next: {redo} (`dojo interview {redo}`)", markup=False)
    elif any(t.scores for t in rows):
        out.print("Nothing to redo: every kata's last interview scored hire or better.")
    return 0
