"""Asking questions at a terminal: `dojo ask` (a bank drill), `dojo interviewer` (the packet), and
the prompts the interview's follow-ups share with them.

An answer (dojo.interview.answer) is shown back rendered, then the model answer and numbered rubric;
the learner marks the points covered ("1 3", "all", or Enter for none), and a blank answer covers
none. Each marked point is shown with its evidence in the answer (dojo.interview.evidence), or as
self-assessed. `dojo ask` records each marked drill and asks the first matching question not drilled yet.
"""

from __future__ import annotations

import sys
import textwrap

from rich.markdown import Markdown
from rich.markup import escape

from dojo import catalog
from dojo.interview import answer, bank, evidence, session
from dojo.practice import history, prose, report

BLANK = "No answer given: it covers none of the rubric points."
NOT_FOUND = "self-assessed, not found in the answer"


def read_line(prompt: str) -> str:
    """One line from stdin, stripped, after `prompt` (flushed, so a script or a pipe sees it first).
    Raises EOFError at end of input."""
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.strip()


def read_points(out, n: int) -> list[int]:
    """The rubric points (1..n) the learner says they covered; asks again on anything else."""
    while True:
        text = read_line(
            f"Which points did you cover? (numbers 1-{n} separated by spaces, 'all', or Enter for none): "
        )
        if text.lower() == "all":
            return list(range(1, n + 1))
        try:
            points = [int(t) for t in text.replace(",", " ").split()]
        except ValueError:
            points = [0]
        if all(1 <= p <= n for p in points):
            return points
        out.print(f"Give numbers from 1 to {n}.")


def show_answer(out, text: str) -> None:
    """The learner's answer, rendered as Markdown (or a note that it is blank)."""
    if text.strip():
        out.print("[bold]Your answer.[/bold]")
        prose.show(out, text, page=False)


def show_model_answer(out, model: str, rubric: list[str]) -> None:
    """The model answer rendered as Markdown, then the numbered rubric."""
    out.print("\n[bold]Model answer.[/bold]")
    prose.show(out, model, page=False)
    out.print("[bold]Rubric:[/bold]")
    for i, point in enumerate(rubric, start=1):  # each point's Markdown as plain text: keeps "1." to mark by
        out.print(f"  {i}. {prose.render_plain(point)}", markup=False)


def mark(out, given: str, n: int) -> list[int]:
    """The rubric points (1..n) an answer covered: none for a blank one (said so, not asked), else
    `read_points`. Raises EOFError at end of input."""
    if not given.strip():
        out.print(BLANK)
        return []
    return read_points(out, n)


def show_marked(out, points: list[dict], question: int | None = None) -> None:
    """Each marked point (`session.marked`), numbered "N." (or "Q<question>.N"), and the evidence its
    answer holds, or NOT_FOUND."""
    for p in points:
        number = f"{p['number']}." if question is None else f"Q{question}.{p['number']}"
        out.print(f"  {number} {prose.render_plain(p['point'])}", markup=False)
        said = f"found: {', '.join(p['found'])}" if p["found"] else f"{NOT_FOUND} (no credit)"
        out.print(f"       {said}", markup=False)


def cmd_interviewer(args) -> int:
    out = report.console()
    p = bank.packet(catalog.get(args.slug))
    md = out.is_terminal

    def section(title: str, text: str) -> None:
        out.print(f"\n[bold]== {title} ==[/bold]")
        out.print(Markdown(text) if md else text, markup=False)

    out.print(
        f"[bold]Interviewer's packet: {p.kata.slug}[/bold] ({escape(p.kata.title)}, {p.kata.minutes} min)"
    )
    section("Prompt (give the candidate this)", p.prompt)
    section("Expected approach", p.approach)
    section(
        "Hints to give, and when",
        "\n\n".join(
            f"Hint {i} (around minute {when}, if stuck):\n{text}"
            for i, (when, text) in enumerate(p.hints, start=1)
        )
        or "(no hints)",
    )
    section(
        "Follow-up questions, model answers and rubric",
        "\n\n".join(
            f"Q{i}: {q.question}\nModel answer: {q.answer}\nRubric:\n"
            + "\n".join(
                f"  - {r}\n    evidence: {', '.join(t.text for t in evidence.terms(r))}" for r in q.rubric
            )
            for i, q in enumerate(p.questions, start=1)
        )
        or "(no questions)",
    )
    section(
        "Common mistakes (each one a known-buggy variant the hidden suite catches)",
        "\n".join(f"- {line}" for _, line in p.mistakes) or "(none recorded)",
    )
    scoring = session.__doc__.split("Scoring, and the verdict thresholds:")[1].split("Nothing here")[0]
    section("Scoring", textwrap.dedent(scoring).strip())
    return 0


def cmd_ask(args) -> int:
    out = report.console()
    entries = bank.pick(args.topic)
    asked = {detail.split(" ", 1)[1] for _, _, _, detail in history.events("bank", "ask") if " " in detail}
    entry = next((e for e in entries if e.question.question not in asked), entries[0])
    q = entry.question
    out.print(f"[bold]Bank question[/bold] ({escape(entry.topic)})")
    prose.show(out, q.question, page=False)
    try:
        given = answer.read_answer(q.question)
    except EOFError:
        show_model_answer(out, q.answer, q.rubric)  # no input: show the model answer anyway, mark nothing
        return 0
    show_answer(out, given)
    show_model_answer(out, q.answer, q.rubric)
    try:
        covered = mark(out, given, len(q.rubric))
    except EOFError:
        return 0
    points = session.marked(q.rubric, given, covered, q.question)
    unfound = sum(1 for p in points if not p["found"])
    out.print(
        f"Covered {len(covered)} of {len(q.rubric)} rubric points"
        + (f" ({unfound} {NOT_FOUND})." if unfound else ".")
    )
    show_marked(out, points)
    history.record_event("bank", "ask", f"{len(covered)}/{len(q.rubric)} {q.question}")
    return 0
