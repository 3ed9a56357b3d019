"""What a learner reads after grading, and the results file a grader reads.

`console()` is rich on a terminal and plain text elsewhere (no colour, no wrapping: tests and
pipes read it). `show_result` prints one line per property (pass/FAIL, or "?" for a timing test
the machine was too noisy to decide, with why), then the score and time, and how to re-run the
inconclusive ones. `write_results` writes the Exercism-style JSON atomically.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.text import Text

from dojo.grading.result import GradeResult

MESSAGE_LINES = 6  # lines of one failure message shown in the terminal (the JSON keeps it whole)


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty() and not os.environ.get("NO_COLOR"):
        return Console(file=stream, highlight=False)
    return Console(file=stream, highlight=False, color_system=None, width=10_000, soft_wrap=True, emoji=False)


def show_result(result: GradeResult, out: Console, *, title: str = "") -> None:
    heading = Text(f"{result.slug}", style="bold")
    if title:
        heading.append(f" · {title}", style="")
    heading.append(f"   ({result.path})", style="dim")
    out.print(heading)
    for test in result.tests:
        out.print(_test_line(test))
        if test.outcome in ("failed", "inconclusive") and test.message:
            lines = test.message.strip().splitlines()
            shown = lines[:MESSAGE_LINES] + ([f"... ({len(lines) - MESSAGE_LINES} more lines)"] if len(lines) > MESSAGE_LINES else [])
            for line in shown:
                out.print(Text(f"        {line}", style="red" if test.outcome == "failed" else "yellow"))
    if result.error:
        out.print(Text(f"Problem: {result.error}", style="bold red"))
    score = Text("Score ", style="bold")
    failing = sum(1 for t in result.tests if t.outcome == "failed")
    unsure = len(result.inconclusive)
    counted = len(result.tests) - unsure
    score.append(f"{result.points}/{result.total} points", style="bold green" if result.passed else "bold yellow")
    score.append(f" · {counted - failing}/{counted} tests passing · {result.duration:.1f} s")
    if unsure:
        score.append(f" · {unsure} inconclusive (machine too noisy to decide; not counted: "
                     f"`dojo check {result.slug} --rerun-inconclusive` re-runs them)", style="yellow")
    if result.examples_only:
        score.append(" · README examples only", style="dim")
    out.print(score)
    for note in result.notes:
        out.print(Text(f"Note: {note}", style="dim" if note.startswith("graded with") else "yellow"))


def _test_line(test) -> Text:
    mark = {"passed": ("pass", "green"), "skipped": ("skip", "dim"), "inconclusive": ("?", "yellow")}.get(
        test.outcome, ("FAIL", "bold red"))
    line = Text(f"  {mark[0]:<4}  ", style=mark[1])
    earned = test.points if test.outcome == "passed" else 0
    line.append(f"-/{test.points}" if test.outcome == "inconclusive" else f"{earned}/{test.points}", style="dim")
    line.append(" pt  ", style="dim")
    line.append(test.property)
    if "[" in test.name:  # a parametrized case: say which
        line.append(f" [{test.name.split('[', 1)[1]}", style="dim")
    if test.example:
        line.append("  (README example)", style="dim")
    return line


def verdict(result: GradeResult, slug: str) -> str:
    """One closing line: what to do next."""
    if result.passed and not result.examples_only and result.inconclusive:
        return (f"Every test that could decide passes; {len(result.inconclusive)} timing test(s) could not on this busy "
                f"machine: `dojo check {slug} --rerun-inconclusive` when it is quieter.")
    if result.passed and not result.examples_only:
        return f"All tests pass. `dojo solution {slug}` shows the reference to compare with."
    if result.passed:
        return f"The README examples pass. `dojo check {slug}` runs the full hidden suite."
    return f"Keep going: edit the file and run `dojo check {slug}` again (`dojo hint {slug}` if stuck)."


def write_results(result: GradeResult, path: Path) -> None:
    """Write results.json atomically: a reader sees the old document or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(result.to_json(), f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
