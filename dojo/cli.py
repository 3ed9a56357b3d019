"""`dojo`: the practice loop's command line. Parsing and printing only; the work is in dojo.*.

Built-in commands: (none) welcome · list · start · check · hint · watch · reset · solution · grade ·
status. Other modules add commands: each name in PLUGINS is imported (skipped only while that module
does not exist yet) and its `register(subparsers)` adds parsers whose `func(args) -> int` runs them.
Exit codes: 0 success (for check: every test passed), 1 failure, 2 bad usage (unknown kata ...).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import warnings
from pathlib import Path

from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from dojo import catalog
from dojo.grading import grade
from dojo.interview import takehome
from dojo.practice import check, history, prose, report, workspace
from dojo.errors import UsageError

PLUGINS = ("dojo.tools.demo", "dojo.tools.roofline", "dojo.interview.flow", "dojo.notebook.commands", "dojo.notebook.lab", "dojo.tools.bench")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(load_plugins=bool(argv) and argv[0] not in BUILTIN)  # plugins may import torch
    args = parser.parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        if (code := _during_interview(args)) is not None:
            return code
        return args.func(args)
    except (catalog.UnknownKata, UsageError) as exc:
        report.console(stderr=True).print(f"dojo: {exc}", markup=False)
        return 2
    except (FileNotFoundError, history.ProgressDBError, ValueError) as exc:
        report.console(stderr=True).print(f"dojo: {exc}", markup=False)
        return 1
    except KeyboardInterrupt:
        return 130


def build_parser(load_plugins: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dojo", description="Interview-practice katas for LLM inference engineering.")
    parser.set_defaults(func=cmd_welcome)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    sub.add_parser("list", help="every kata, with your progress").set_defaults(func=cmd_list)
    p = sub.add_parser("start", help="copy a kata's stub into your workspace and show its prompt")
    p.add_argument("slug")
    p.add_argument("--force", action="store_true", help="replace work already there (it is backed up)")
    p.set_defaults(func=cmd_start)
    p = sub.add_parser("check", help="grade your workspace copy (default: the kata in progress)")
    _grading_args(p)
    p.add_argument("--examples-only", action="store_true", help="run only the README's worked examples")
    p.add_argument("--notebook", nargs="?", const="", default=None, metavar="PATH",
                   help="grade a notebook's solution cells instead (default PATH: workspace/<slug>.ipynb)")
    p.add_argument("--rerun-inconclusive", action="store_true",
                   help="re-run only the timing tests the last check left inconclusive, and merge them into it")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("hint", help="the next hint you have not seen")
    p.add_argument("slug", nargs="?")
    p.add_argument("--all", action="store_true", help="show every hint seen so far")
    p.set_defaults(func=cmd_hint)
    p = sub.add_parser("watch", help="re-grade on every save of your workspace file")
    _grading_args(p)
    p.add_argument("--interval", type=float, default=0.5, help="seconds between looks at the file")
    p.add_argument("--runs", type=int, default=0, help="stop after this many gradings (default: never)")
    p.set_defaults(func=cmd_watch)
    p = sub.add_parser("reset", help="restore the pristine stub (your copy is backed up)")
    p.add_argument("slug")
    p.add_argument("--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_reset)
    p = sub.add_parser("solution", help="show the reference, once the kata has passed")
    p.add_argument("slug")
    p.add_argument("--force", action="store_true", help="show it anyway (recorded as a reveal)")
    p.set_defaults(func=cmd_solution)
    p = sub.add_parser("grade", help="grade take-home submissions: folders of <slug>.py or <slug>.ipynb, or notebooks")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the full machine-readable report here")
    p.add_argument("--jobs", type=int, default=2, help="gradings at once (default 2)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per kata before grading stops")
    p.set_defaults(func=cmd_grade)
    sub.add_parser("status", help="the kata in progress").set_defaults(func=cmd_status)

    if load_plugins:
        for name in PLUGINS:
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name == name:
                    continue  # not written yet
                raise
            module.register(sub)
    return parser


BUILTIN = ("list", "start", "check", "hint", "watch", "reset", "solution", "grade", "status")


def _grading_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("slug", nargs="?", help="kata to grade (default: the kata in progress)")
    p.add_argument("--timeout", type=float, default=None, help=f"seconds before grading stops (default {grade.DEFAULT_TIMEOUT_S:g})")


INTERVIEW_RULED = ("check", "hint", "watch", "solution", "status")


def _during_interview(args) -> int | None:
    """The one interface to the interview layer: while a mock interview is open, dojo.interview decides
    what the commands in INTERVIEW_RULED do (examples only, counted; hints cost points; the countdown;
    no full suite or reference): its exit code, or None to run the command as usual."""
    command = args.func.__name__.removeprefix("cmd_")
    if command not in INTERVIEW_RULED:
        return None
    from dojo.interview import flow as interview

    return interview.during_session(command, args)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    report.console(stderr=True).print(f"dojo: warning: {message}", markup=False)


def _slug_or_current(slug: str | None) -> str:
    if slug:
        return catalog.get(slug).slug
    current = history.current_kata()
    if current is None:
        raise UsageError("no kata in progress: start one with `dojo start <slug>` (see `dojo list`)")
    return current


# ---- commands ----------------------------------------------------------------------------------


def cmd_welcome(args) -> int:
    out = report.console()
    katas = catalog.load()
    progress = history.progress()
    passing = [k for k in katas if progress.get(k.slug) and progress[k.slug].status == "passing"]
    out.print(f"[bold]decode-dojo[/bold]: {len(katas)} katas of LLM inference engineering, from a BPE tokenizer to "
              "KV caches, beam search, rooflines and INT4 weights. Each is a stub to fill in and a hidden test suite "
              "to pass; together the reference solutions chat with SmolLM2-135M.")
    out.print(f"Progress: {len(passing)} of {len(katas)} passing.")
    current = history.current_kata()
    if current and current not in {k.slug for k in passing}:
        kata = catalog.get(current)
        out.print(f"In progress: [bold]{kata.slug}[/bold] ({escape(kata.title)}); edit {escape(str(workspace.kata_file(kata.slug)))}, "
                  f"then: [bold]dojo check {kata.slug}[/bold]")
    else:
        todo = [k for k in katas if k not in passing and k.slug != current]
        if todo:
            kata = todo[0]
            out.print(f"Suggested next: [bold]{kata.slug}[/bold] ({escape(kata.title)}, about {kata.minutes} min): "
                      f"[bold]dojo start {kata.slug}[/bold]")
        else:
            out.print("Every kata passes. Try an interview, or a kata again from scratch with `dojo reset <slug>`.")
    out.print("Practice: dojo list · start <kata> · check · hint · watch · reset <kata> · solution <kata> · "
              "status · notebook <kata> · lab")
    out.print("Interview: dojo interview \\[kata] · submit · ask \\[topic] · interviewer <kata> · history · stats")
    out.print("The model: dojo demo \"question\" · roofline · bench batching|latency   "
              "Grading: dojo grade PATH   All: dojo --help")
    return 0


def cmd_list(args) -> int:
    out = report.console()
    progress = history.progress()
    rows = []
    for kata in catalog.load():
        p = progress.get(kata.slug)
        if p is None:
            status = "not started" if not workspace.kata_file(kata.slug).exists() else "in progress"
        elif p.attempts:
            status = f"{p.status}, best {p.best_points}/{p.best_total}"
        else:
            status = p.status
        if not kata.has_suite:
            status += " (no tests yet)"
        rows.append((str(kata.number), kata.slug, kata.title, "*" * kata.difficulty, str(kata.minutes), status))
    headers = ("#", "kata", "title", "difficulty", "minutes", "status")
    widths = [max(len(header), *(len(r[i]) for r in rows)) for i, header in enumerate(headers)]
    room = out.width - (sum(widths) - widths[2]) - 2 * (len(headers) - 1)  # left for the title
    table = Table(box=None, pad_edge=False, header_style="bold")
    for i, header in enumerate(headers):
        # the title is the one column that gives way on a narrow terminal
        table.add_column(header, no_wrap=True, overflow="ellipsis", width=min(widths[2], max(12, room)) if i == 2 else widths[i])
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
            out.print(f"You already have work on {kata.slug} in {result.path}: kept it "
                      f"(`dojo start {kata.slug} --force` replaces it with the stub, after a backup).")
        out.print(f"Edit {result.path}, then: dojo check {kata.slug}")
        return 0
    prose.show(out, kata.readme())
    if result.backup:
        out.print(f"Your earlier work is backed up at {result.backup}")
    out.print(f"[bold]Edit[/bold] {escape(str(result.path))}")
    out.print(f"Then: [bold]dojo check {kata.slug}[/bold]   (stuck? dojo hint {kata.slug})")
    return 0


def cmd_check(args) -> int:
    if args.rerun_inconclusive and (args.examples_only or args.notebook is not None):
        raise UsageError("--rerun-inconclusive re-runs part of a full check of the workspace file: "
                         "not with --examples-only or --notebook")
    if args.notebook is not None:  # notebook mode (dojo.notebook): the .ipynb's solution cells
        from dojo.notebook import commands as notebook

        return notebook.run_check(args)
    slug = _slug_or_current(args.slug)
    kata = catalog.get(slug)
    try:
        result = check.check(slug, examples_only=args.examples_only, timeout=args.timeout,
                             rerun_inconclusive=args.rerun_inconclusive)
    except ValueError as exc:
        if not args.rerun_inconclusive:
            raise
        raise UsageError(str(exc)) from exc
    out = report.console()
    report.show_result(result, out, title=kata.title)
    out.print(report.verdict(result, slug))
    return 0 if result.passed else 1


def cmd_watch(args) -> int:
    slug = _slug_or_current(args.slug)
    kata = catalog.get(slug)
    path = workspace.kata_file(slug)
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
            out.print(f"Watching {path}: save to re-grade, Ctrl-C to stop.")
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
    unseen = [n for n in range(1, len(hints) + 1) if n not in seen]
    if not unseen:
        out.print(f"You have seen all {len(hints)} hints for {slug}; `dojo hint {slug} --all` shows them again.")
        return 0
    n = unseen[0]
    history.record_hint(slug, n)
    _print_hint(out, n, len(hints), hints[n - 1])
    return 0


def _print_hint(out, n: int, total: int, text: str) -> None:
    out.print(f"[bold]Hint {n} of {total}[/bold]")
    prose.show(out, text)


def cmd_reset(args) -> int:
    out = report.console()
    kata = catalog.get(args.slug)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"reset replaces your copy of {kata.slug} with the stub: confirm with `dojo reset {kata.slug} --yes`")
        answer = input(f"Restore the pristine stub of {kata.slug}? Your copy is backed up first. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            out.print("Nothing changed.")
            return 1
    result = workspace.reset(kata)
    history.record_event(kata.slug, "reset")
    if result.backup:
        out.print(f"Your copy is backed up at {result.backup}")
    out.print(f"{result.path} is the pristine stub again.")
    return 0


def cmd_solution(args) -> int:
    out = report.console()
    kata = catalog.get(args.slug)
    if not kata.reference.is_file():
        raise FileNotFoundError(f"kata {kata.slug!r} has no reference solution yet")
    passed = history.has_passed(kata.slug)
    if not passed and not args.force:
        out.print(f"The reference for {kata.slug} opens once your solution passes (`dojo check {kata.slug}`). "
                  f"`dojo solution {kata.slug} --force` shows it now, recorded as a reveal.")
        return 1
    history.record_reveal(kata.slug, forced=not passed)
    code = kata.reference.read_text()
    out.print(Syntax(code, "python", line_numbers=True) if out.is_terminal else code, markup=False)
    if not passed:
        out.print(f"(shown before a pass: recorded as a reveal of {kata.slug})")
    return 0


def cmd_grade(args) -> int:
    out = report.console()
    for raw in args.paths:
        if not Path(raw).is_dir() and not (raw.endswith(".ipynb") and Path(raw).is_file()):
            raise UsageError(f"{raw} is not a directory: each PATH is a folder of kata files (<slug>.py) or a notebook (.ipynb)")
    doc = takehome.grade_submissions([Path(p) for p in args.paths], jobs=args.jobs, timeout=args.timeout)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2))
    submissions = doc["submissions"]
    slugs = [k.slug for k in catalog.load() if any(k.slug in s["katas"] for s in submissions)]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("submission", *slugs, "total", "integrity", "sandboxed"):
        table.add_column(column)
    for sub in submissions:
        cells = []
        for slug in slugs:
            r = sub["katas"].get(slug)
            cells.append("-" if r is None else f"{r['points']}/{r['total']}" + ("" if r["status"] == "pass" else f" {r['status']}")
                         + (f" ({len(r['inconclusive'])} inconclusive)" if r["inconclusive"] else ""))
        note = "" if sub["katas"] else " (no kata files)"
        note += f" ({sub['inconclusive']} inconclusive: timing tests the machine was too noisy to decide, not counted)" \
            if sub["inconclusive"] else ""
        table.add_row(sub["path"], *cells, f"{sub['points']}/{sub['total']}{note}", *takehome.flags(sub))
    out.print(table, markup=False)
    for line in takehome.findings(doc):
        out.print(line, markup=False)
    if args.json:
        out.print(f"Full report: {args.json}", markup=False)
    return 0 if all(s["passed"] for s in submissions) else 1


def cmd_status(args) -> int:
    out = report.console()
    current = history.current_kata()
    if current is None:
        out.print("No kata in progress: `dojo list` shows them, `dojo start <slug>` begins one.")
        return 0
    kata = catalog.get(current)
    tries = history.attempts(current)
    out.print(f"In progress: [bold]{kata.slug}[/bold] ({escape(kata.title)})")
    out.print(f"File: {workspace.kata_file(kata.slug)}")
    if tries:
        last = tries[-1]
        out.print(f"Last check: {last.points}/{last.total} points, {'passing' if last.passed else 'not passing yet'} "
                  f"({len(tries)} attempt{'s' if len(tries) != 1 else ''})")
    else:
        out.print("Not checked yet.")
    out.print(f"Hints seen: {len(history.hints_seen(current))} of {len(kata.hints())}")
    out.print(f"Next: dojo check {kata.slug}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
