"""What a learner reads after grading, and the results file a grader reads.

`console()` is rich on a terminal and plain text elsewhere (no colour, no wrapping: tests and pipes
read it). `working` says that a long grading is under way (a spinner on a terminal). `show_result`
prints one line per property (pass, FAIL, or "?" for a timing test left inconclusive), the cases of a
parametrised test folded (dojo.practice.fold), one "todo" line for the tests that wait only on
functions not written yet, the optional part apart, then the score and the notes. `write_results`
writes the Exercism-style JSON atomically.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.text import Text

from dojo.grading.result import GradeResult, TestResult
from dojo.practice.fold import Block, Unwritten, fold, set_aside_unwritten

MESSAGE_LINES = 6  # lines of one failure message shown in the terminal (the JSON keeps it whole)


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty() and not os.environ.get("NO_COLOR"):
        return Console(file=stream, highlight=False)
    return Console(file=stream, highlight=False, color_system=None, width=10_000, soft_wrap=True, emoji=False)


@contextmanager
def working(out: Console, what: str) -> Iterator[None]:
    """`what` ("Grading ...") while the block runs: on a terminal a spinner and the time elapsed, erased
    when the block ends; elsewhere one plain line before it."""
    if not out.is_terminal:
        out.print(f"{what} ...", markup=False)
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        TimeElapsedColumn(),
        console=out,
        transient=True,
    ) as bar:
        bar.add_task(what, total=None)
        yield


def show_result(result: GradeResult, out: Console, *, title: str = "") -> None:
    """The report: a line per property (the cases of a parametrised test folded into one block, each cause
    of failure once), the tests that fail only because a stub's function is not written yet in one line
    naming those functions, the optional part's tests in a short section of their own (its one line alone
    while none of it is written), then the score and the notes that concern the learner. On a console that
    wraps, a long line wraps inside its column (a hanging indent)."""
    heading = Text(f"{result.slug}", style="bold")
    if title:
        heading.append(f" · {title}", style="")
    heading.append(f"   ({result.path})", style="dim")
    _say(out, heading, 2)
    required = [t for t in result.tests if not t.optional]
    _show_tests(out, required)
    optional = [t for t in result.tests if t.optional]
    if optional:
        earned, available = result.optional_points
        _say(out, Text(f"  optional part: {earned}/{available} pt — not required to pass", style="bold"), 2)
        _show_tests(out, optional, quiet_if_untouched=True)
    if result.error:
        _say(out, Text(f"Problem: {result.error}", style="bold red"), 9)
    score = Text("Score ", style="bold")
    failing = sum(1 for t in required if t.outcome == "failed")
    unsure = sum(1 for t in required if t.outcome == "inconclusive")
    counted = len(required) - unsure
    score.append(
        f"{result.points}/{result.total} points", style="bold green" if result.passed else "bold yellow"
    )
    score.append(f" · {counted - failing}/{counted} tests passing · {result.duration:.1f} s")
    if unsure:
        score.append(
            f" · {unsure} inconclusive (machine too noisy to decide; not counted: "
            f"`dojo check {result.slug} --rerun-inconclusive` re-runs them)",
            style="yellow",
        )
    if result.examples_only:
        score.append(" · README examples only", style="dim")
    _say(out, score, 6)
    for note in shown_notes(result.notes):
        _say(out, Text(f"Note: {note}", style="dim" if note.startswith(PRISTINE) else "yellow"), 6)


def _show_tests(out: Console, tests: list[TestResult], *, quiet_if_untouched: bool = False) -> None:
    """A line per folded block and its causes, then one todo line for the blocks that wait only on
    unwritten functions; `quiet_if_untouched`: nothing at all when every block waits so (an optional part
    not started)."""
    blocks, todo = set_aside_unwritten(fold(tests))
    if quiet_if_untouched and not blocks:
        return
    for block in blocks:
        line = _test_line(block)
        _say(out, line, _MARK + len(line.plain[_MARK:].split(" pt  ", 1)[0]) + len(" pt  "))
        for cause in block.causes:
            lines = cause.message.splitlines() or [""]
            if cause.who:
                lines[0] = f"{cause.who}: {lines[0]}"
            shown = lines[:MESSAGE_LINES] + (
                [f"... ({len(lines) - MESSAGE_LINES} more lines)"] if len(lines) > MESSAGE_LINES else []
            )
            for text in shown:
                own = len(text) - len(text.lstrip(" "))
                _say(
                    out,
                    Text(f"        {text}", style="red" if cause.outcome == "failed" else "yellow"),
                    8 + own,
                )
    if todo.blocks:
        line = _unwritten_line(todo)
        _say(out, line, _MARK + len(line.plain[_MARK:].split(" pt  ", 1)[0]) + len(" pt  "))


PRISTINE = (
    "graded with pristine copies"  # dojo.grading.grade's standing note: news only beside a change it caught
)
_TAMPERED = "while your code was being graded"  # dojo.grading.grade's words for a guarded file that changed
_MARK = len("  FAIL  ")


def shown_notes(notes: list[str]) -> list[str]:
    """The notes worth a learner's line: the pristine-copies note only when the learner's code changed a
    guarded file (a tampering note says which); results.json keeps them all."""
    tampered = any(_TAMPERED in note for note in notes)
    return [note for note in notes if tampered or not note.startswith(PRISTINE)]


def _say(out: Console, line: Text, indent: int) -> None:
    """Print `line`; on a console that wraps, its wrapped parts start `indent` columns in (a hanging indent)."""
    if out.soft_wrap or out.width < indent + 20 or line.cell_len <= out.width:
        out.print(line)
        return
    parts = line[indent:].wrap(out, out.width - indent, overflow="fold")
    for n, part in enumerate(parts):
        part.rstrip()
        out.print(Text.assemble(line[:indent] if n == 0 else " " * indent, part), no_wrap=True)


def _test_line(block: Block) -> Text:
    mark = {"passed": ("pass", "green"), "skipped": ("skip", "dim"), "inconclusive": ("?", "yellow")}.get(
        block.outcome, ("FAIL", "bold red")
    )
    line = Text(f"  {mark[0]:<4}  ", style=mark[1])
    line.append(
        f"-/{block.points}"
        if block.outcome == "inconclusive" and len(block.tests) == 1
        else f"{block.earned}/{block.points}",
        style="dim",
    )
    line.append(" pt  ", style="dim")
    line.append(block.first.property)
    if block.label:
        line.append(f"  ({block.label})", style="dim")
    if block.first.example:
        line.append("  (README example)", style="dim")
    return line


def _unwritten_line(todo: Unwritten) -> Text:
    """ "todo  0/51 pt  not written yet: BlockAllocator.__init__ (paged_kv.py:25), ... — 25 tests wait on
    them" """
    line = Text(f"  {'todo':<4}  ", style="yellow")
    line.append(f"0/{todo.points} pt  ", style="dim")
    line.append("not written yet: ")
    line.append(", ".join(f"{f} ({where})" if where else f for f, where in todo.functions.items()))
    them = "it" if len(todo.functions) == 1 else "them"
    waits = f"{todo.waiting} tests wait" if todo.waiting != 1 else "1 test waits"
    line.append(f" — {waits} on {them}", style="dim")
    return line


def verdict(result: GradeResult, slug: str) -> str:
    """One closing line: what to do next."""
    if result.passed and not result.examples_only and result.inconclusive:
        return (
            f"Every test that could decide passes; {len(result.inconclusive)} timing test(s) could not on this busy "
            f"machine: `dojo check {slug} --rerun-inconclusive` when it is quieter."
        )
    if result.passed and not result.examples_only:
        return f"{all_pass(result)} `dojo solution {slug}` shows the reference to compare with."
    if result.passed:
        return f"The README examples pass. `dojo check {slug}` runs the full hidden suite."
    return f"Keep going: edit the file and run `dojo check {slug}` again (`dojo hint {slug}` if stuck)."


def all_pass(result: GradeResult) -> str:
    """ "All tests pass.", or what an optional part still lacks beside a pass."""
    earned, available = result.optional_points
    if earned == available:
        return "All tests pass."
    return f"All required tests pass (optional part: {earned}/{available} pt, not needed to pass)."


def write_results(result: GradeResult, path: Path) -> None:
    """Write results.json atomically: a reader sees the old document or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(result.to_json(), f, indent=2)
        os.chmod(tmp, 0o644)  # as the kata files (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
