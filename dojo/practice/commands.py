"""The practice loop's commands: welcome, list, start, prompt, check, watch, hint, reset, solution, status.

Printing only: what to grade and record is dojo.practice.check, the files dojo.practice.workspace,
the progress dojo.practice.history. dojo.cli parses the arguments and calls these (`func(args) ->
int`, the exit code); while a mock interview is open it asks dojo.interview first. Grading a notebook
is dojo.notebook.commands' (dojo.cli sends `dojo check` there when `grades_notebook` says so).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from dojo import ROOT, catalog
from dojo.errors import UsageError
from dojo.practice import check, history, prose, report, workspace
from dojo.practice import hints as hint_choice


def _slug_or_current(slug: str | None) -> str:
    if slug:
        return catalog.get(slug).slug
    current = history.current_kata()
    if current is None:
        raise UsageError("no kata in progress: start one with `dojo start <slug>` (see `dojo list`)")
    return current


def grades_notebook(slug: str | None) -> bool:
    """Whether `dojo check [slug]` is for the notebook: the kata (default: the one in progress) has a
    workspace/<slug>.ipynb and no workspace/<slug>.py."""
    slug = _slug_or_current(slug)
    return not workspace.kata_file(slug).exists() and workspace.notebook_file(slug).exists()


def how_to_check(slug: str) -> str:
    """The way to grade the kata in the form it is in progress in."""
    if workspace.form(slug) == "ipynb":
        flag = " --notebook" if workspace.kata_file(slug).exists() else ""  # else plain check grades the .py
        return (
            f"save {workspace.notebook_file(slug).name} and run its last cell (JupyterLab: dojo lab), "
            f"or: dojo check {slug}{flag}"
        )
    return f"dojo check {slug}"


# ---- commands ----------------------------------------------------------------------------------


def cmd_welcome(args) -> int:
    out = report.console()
    katas = catalog.load()
    progress = history.progress()
    passing = [k for k in katas if progress.get(k.slug) and progress[k.slug].status == "passing"]
    out.print(
        f"[bold]decode-dojo[/bold]: {len(katas)} katas of LLM inference engineering, from a BPE tokenizer to "
        "KV caches, beam search, rooflines and INT4 weights. Each is a stub to fill in and a hidden test suite "
        "to pass; together the reference solutions chat with SmolLM2-135M."
    )
    out.print(f"Progress: {len(passing)} of {len(katas)} passing.")
    current = history.current_kata()
    if current and current not in {k.slug for k in passing}:
        kata = catalog.get(current)
        out.print(
            f"In progress: [bold]{kata.slug}[/bold] ({escape(kata.title)}); edit {escape(str(_work_file(kata.slug)))}, "
            f"then: [bold]{escape(how_to_check(kata.slug))}[/bold]"
        )
    else:
        todo = [k for k in katas if k not in passing and k.slug != current]
        if todo:
            kata = todo[0]
            out.print(
                f"Suggested next: [bold]{kata.slug}[/bold] ({escape(kata.title)}, about {kata.minutes} min): "
                f"[bold]dojo start {kata.slug}[/bold]"
            )
        else:
            out.print(
                "Every kata passes. Try an interview, or a kata again from scratch with `dojo reset <slug>`."
            )
    out.print(
        "Practice: dojo list · start <kata> · prompt · check · hint · watch · reset <kata> · solution <kata> · "
        "status · notebook <kata> · lab"
    )
    out.print(
        "Interview: dojo interview \\[kata] · submit · ask \\[topic] · interviewer <kata> · history · stats"
    )
    out.print(
        'The model: dojo demo "question" · serve · roofline · bench batching|latency|serve   '
        "Grading: dojo grade PATH   All: dojo --help"
    )
    if shutil.which("dojo") is None:  # run as `make practice` or .venv/bin/dojo: the shell cannot find it yet
        out.print("To type these commands: [bold]source .venv/bin/activate[/bold] (puts dojo on your PATH)")
    return 0


def cmd_list(args) -> int:
    out = report.console()
    progress = history.progress()
    revealed = history.revealed()
    rows = []
    for kata in catalog.load():
        p = progress.get(kata.slug)
        if p is None:
            status = "not started" if workspace.form(kata.slug) is None else "in progress"
        elif p.attempts:
            status = f"{p.status}, best {p.best_points}/{p.best_total}"
        else:
            status = p.status
        if workspace.form(kata.slug) == "ipynb" and status != "not started":
            status += " (notebook)"
        if not kata.has_suite:
            status += " (no tests yet)"
        if kata.slug in revealed:
            status += " (reference revealed before a pass)"
        title = (
            f"({kata.note}) {kata.title}" if kata.note else kata.title
        )  # first: a narrow terminal cuts the end
        rows.append((str(kata.number), kata.slug, title, "*" * kata.difficulty, str(kata.minutes), status))
    headers = ("#", "kata", "title", "difficulty", "minutes", "status")
    widths = [max(len(header), *(len(r[i]) for r in rows)) for i, header in enumerate(headers)]
    room = out.width - (sum(widths) - widths[2]) - 2 * (len(headers) - 1)  # left for the title
    table = Table(box=None, pad_edge=False, header_style="bold")
    for i, header in enumerate(headers):
        # the title is the one column that gives way on a narrow terminal
        table.add_column(
            header,
            no_wrap=True,
            overflow="ellipsis",
            width=min(widths[2], max(12, room)) if i == 2 else widths[i],
        )
    for row in rows:
        table.add_row(*row)
    out.print(table, markup=False)
    return 0


def cmd_start(args) -> int:
    out = report.console()
    kata = catalog.get(args.slug)
    result = workspace.start(kata, force=args.force)
    history.record_event(kata.slug, "start")
    if not result.created:
        if workspace.has_work(kata):
            out.print(
                f"You already have work on {kata.slug} in {result.path}: kept it "
                f"(`dojo start {kata.slug} --force` replaces it with the stub, after a backup).",
                markup=False,
            )
        out.print(f"Edit {result.path}, then: dojo check {kata.slug}", markup=False)
        return 0
    prose.show(out, kata.readme())
    if result.backup:
        out.print(f"Your earlier work is backed up at {result.backup}", markup=False)
    out.print(f"[bold]Edit[/bold] {escape(str(result.path))}")
    out.print(f"Then: [bold]dojo check {kata.slug}[/bold]   (stuck? dojo hint {kata.slug})")
    return 0


def cmd_check(args) -> int:
    if args.rerun_inconclusive and args.examples_only:
        raise UsageError(
            "--rerun-inconclusive re-runs part of a full check of the workspace file: "
            "not with --examples-only or --notebook"
        )
    slug = _slug_or_current(args.slug)
    kata = catalog.get(slug)
    try:
        result = check.check(
            slug,
            examples_only=args.examples_only,
            timeout=args.timeout,
            rerun_inconclusive=args.rerun_inconclusive,
        )
    except ValueError as exc:
        if not args.rerun_inconclusive:
            raise
        raise UsageError(str(exc)) from exc
    out = report.console()
    report.show_result(result, out, title=kata.title)
    if (
        getattr(args, "interview_open", False)
        and result.passed
        and not result.examples_only
        and not result.inconclusive
    ):
        out.print("All tests pass. (The references stay closed while an interview is open.)")
    else:
        out.print(report.verdict(result, slug))
    if workspace.form(slug) == "ipynb":
        out.print(
            f"{workspace.notebook_file(slug).name}, saved since, is graded by: dojo check {slug} --notebook",
            markup=False,
        )
    return 0 if result.passed else 1


def cmd_watch(args) -> int:
    slug = _slug_or_current(args.slug)
    kata = catalog.get(slug)
    path = workspace.kata_file(slug)
    if not path.exists() and workspace.form(slug) == "ipynb":
        raise UsageError(f"dojo watch follows {path.name}; {slug} is in a notebook: {how_to_check(slug)}")
    if not path.exists():
        raise FileNotFoundError(f"no workspace copy of '{slug}' at {path}: run `dojo start {slug}` first")
    out = report.console()
    runs, code, seen = 0, 1, None
    while True:
        stamp = _stamp(path)
        if stamp != seen:
            seen = stamp
            if out.is_terminal:
                out.clear()
            else:
                out.print("-" * 40)
            result = check.check(slug, mode="watch", timeout=args.timeout)
            report.show_result(result, out, title=kata.title)
            out.print(f"Watching {path}: save to re-grade, Ctrl-C to stop.", markup=False)
            code, runs = (0 if result.passed else 1), runs + 1
            if args.runs and runs >= args.runs:
                return code
        try:
            time.sleep(args.interval)
        except KeyboardInterrupt:
            return code


def _stamp(path: Path) -> tuple | None:
    try:
        st = path.stat()
        return st.st_mtime_ns, st.st_size
    except FileNotFoundError:
        return None


def cmd_hint(args) -> int:
    out = report.console()
    slug = _slug_or_current(args.slug)
    kata = catalog.get(slug)
    hints = kata.hints()
    if not hints:
        out.print(f"{slug} has no hints.")
        return 0
    seen = history.hints_seen(slug)
    if args.all:
        if not seen:
            out.print(f"No hints seen yet for {slug}: `dojo hint {slug}` shows the first.")
        for n in seen:
            _print_hint(out, n, len(hints), hints[n - 1])
        return 0
    failing = dict([] if args.next else hint_choice.failures(workspace.results_file(slug)))
    n, test = hint_choice.pick(kata.hint_helps(), set(seen), list(failing))
    if n is None:
        out.print(
            f"You have seen all {len(hints)} hints for {slug}; `dojo hint {slug} --all` shows them again."
        )
        return 0
    history.record_hint(slug, n)
    why = (
        f", chosen for your first failing property '{escape(failing[test])}'; `dojo hint {slug} --next` goes in "
        "order"
        if test
        else ""
    )
    _print_hint(out, n, len(hints), hints[n - 1], why)
    return 0


def _print_hint(out, n: int, total: int, text: str, why: str = "") -> None:
    out.print(f"[bold]Hint {n} of {total}[/bold]{why}")
    prose.show(out, text)


def cmd_reset(args) -> int:
    out = report.console()
    kata = catalog.get(args.slug)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(
                f"reset replaces your copy of {kata.slug} with the stub: confirm with `dojo reset {kata.slug} --yes`"
            )
        answer = input(f"Restore the pristine stub of {kata.slug}? Your copy is backed up first. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            out.print("Nothing changed.")
            return 1
    result = workspace.reset(kata)
    history.record_event(kata.slug, "reset")
    if result.backup:
        out.print(f"Your copy is backed up at {result.backup}", markup=False)
    out.print(f"{result.path} is the pristine stub again.", markup=False)
    return 0


def cmd_solution(args) -> int:
    out = report.console()
    kata = catalog.get(args.slug)
    if not kata.reference.is_file():
        raise FileNotFoundError(f"kata {kata.slug!r} has no reference solution yet")
    passed = history.has_passed(kata.slug)
    if not passed and not args.force:
        out.print(
            f"The reference for {kata.slug} opens once your solution passes (`dojo check {kata.slug}`). "
            f"`dojo solution {kata.slug} --force` shows it now, recorded as a reveal."
        )
        return 1
    if not passed and not args.yes and not _confirm_reveal(kata.slug):
        out.print("Nothing shown.")
        return 1
    history.record_reveal(kata.slug, forced=not passed)
    code = kata.reference.read_text()
    header = (
        f"Reference solution for {kata.slug}: {_shown_path(kata.reference)} ({code.count(chr(10))} lines)"
    )
    body = Syntax(code, "python", line_numbers=True) if out.is_terminal else code
    prose.paged(out, header, body, height=code.count("\n") + 1)
    if not passed:
        out.print(f"(shown before a pass: recorded as a reveal of {kata.slug})")
    return 0


def _confirm_reveal(slug: str) -> bool:
    """Whether the learner, asked on a terminal, wants the reference of an unpassed kata now. Raises
    UsageError off a terminal: --yes says so there."""
    if not sys.stdin.isatty():
        raise UsageError(
            f"{slug} has not passed: showing its reference now is recorded as a reveal. "
            f"Confirm with `dojo solution {slug} --force --yes`"
        )
    answer = input(f"Show the reference of {slug} before it passes? It is recorded as a reveal. [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _shown_path(path: Path) -> str:
    """`path` relative to the repository when it is inside it, else whole."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def cmd_prompt(args) -> int:
    """`dojo prompt [kata]`: a started kata's prompt again, rendered and paged as `dojo start` shows it."""
    slug = _slug_or_current(args.slug)
    kata = catalog.get(slug)
    if not workspace.kata_file(slug).exists():
        raise UsageError(f"{slug} is not started: `dojo start {slug}` copies its stub and shows the prompt")
    prose.show(report.console(), kata.readme())
    return 0


def cmd_status(args) -> int:
    out = report.console()
    current = history.current_kata()
    if current is None:
        out.print("No kata in progress: `dojo list` shows them, `dojo start <slug>` begins one.")
        return 0
    kata = catalog.get(current)
    tries = history.attempts(current)
    out.print(f"In progress: [bold]{kata.slug}[/bold] ({escape(kata.title)})")
    out.print(
        f"File: {_work_file(kata.slug)}" + ("  (a notebook)" if workspace.form(kata.slug) == "ipynb" else ""),
        markup=False,
    )
    if tries:
        last = tries[-1]
        out.print(
            f"Last check: {last.points}/{last.total} points, {'passing' if last.passed else 'not passing yet'} "
            f"({len(tries)} attempt{'s' if len(tries) != 1 else ''})"
        )
    else:
        out.print("Not checked yet.")
    out.print(f"Hints seen: {len(history.hints_seen(current))} of {len(kata.hints())}")
    if current in history.revealed():
        out.print("Reference revealed before a pass (`dojo solution --force`): recorded as a reveal.")
    out.print(f"Next: {how_to_check(kata.slug)}", markup=False)
    return 0


def _work_file(slug: str) -> Path:
    """The learner's file for `slug` in the form it is in progress in (the .py when there is none yet)."""
    return workspace.notebook_file(slug) if workspace.form(slug) == "ipynb" else workspace.kata_file(slug)
