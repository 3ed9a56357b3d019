"""`dojo`: the command line. Argument parsing and dispatch only; the work is in the layers below.

The built-in commands run dojo.practice.commands (`grade`: dojo.interview.takehome, printed here); each
module in PLUGINS adds its commands with `register(subparsers)`, and COMMANDS says which adds which, so
that one command imports only its own module. While a mock interview is open, the commands in
INTERVIEW_RULED ask dojo.interview.flow first. Exit codes: 0 success, 1 failure, 2 bad usage.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from pathlib import Path

from dojo.errors import UsageError

PLUGINS = (
    "dojo.tools.demo",
    "dojo.tools.serve",
    "dojo.tools.roofline",
    "dojo.interview.flow",
    "dojo.notebook.commands",
    "dojo.notebook.lab",
    "dojo.tools.bench",
)
COMMANDS = {
    "demo": "dojo.tools.demo",
    "serve": "dojo.tools.serve",
    "roofline": "dojo.tools.roofline",
    **dict.fromkeys(("interview", "submit", "interviewer", "history", "stats", "ask"), "dojo.interview.flow"),
    "notebook": "dojo.notebook.commands",
    "lab": "dojo.notebook.lab",
    "bench": "dojo.tools.bench",
}


def main(argv: list[str] | None = None) -> int:
    command_line = argv is None
    argv = sys.argv[1:] if argv is None else argv
    first = argv[0] if argv else None
    if first is None or first in BUILTIN:
        parser = build_parser(load_plugins=False)  # plugins may import torch
    elif first in COMMANDS and COMMANDS[first] in PLUGINS:
        parser = build_parser(builtins=False, plugins=(COMMANDS[first],))
    else:
        parser = build_parser()
    args = parser.parse_args(argv)
    warnings.showwarning = _show_warning
    code = _run(args)
    if command_line and getattr(args, "fast_exit", False):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(args: argparse.Namespace) -> int:
    from dojo.catalog import UnknownKata
    from dojo.practice import history

    try:
        if (code := _during_interview(args)) is not None:
            return code
        return args.func(args)
    except (UnknownKata, UsageError) as exc:
        _console().print(f"dojo: {exc}", markup=False)
        return 2
    except (FileNotFoundError, history.ProgressDBError, ValueError) as exc:
        _console().print(f"dojo: {exc}", markup=False)
        return 1
    except KeyboardInterrupt:
        return 130


def _console():
    from dojo.practice import report

    return report.console(stderr=True)


def build_parser(
    load_plugins: bool = True, *, builtins: bool = True, plugins: tuple[str, ...] | None = None
) -> argparse.ArgumentParser:
    """The parser: the built-in commands unless `builtins` is false, and the commands of `plugins`
    (default: PLUGINS) when `load_plugins`."""
    parser = argparse.ArgumentParser(
        prog="dojo", description="Interview-practice katas for LLM inference engineering."
    )
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    if builtins:
        _add_builtins(parser, sub)
    if load_plugins:
        for name in PLUGINS if plugins is None else plugins:
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name == name:
                    continue  # not written yet
                raise
            module.register(sub)
    return parser


def _add_builtins(parser: argparse.ArgumentParser, sub) -> None:
    from dojo.practice import commands as practice

    parser.set_defaults(func=practice.cmd_welcome)

    sub.add_parser("list", help="every kata, with your progress").set_defaults(func=practice.cmd_list)
    p = sub.add_parser("start", help="copy a kata's stub into your workspace and show its prompt")
    p.add_argument("slug")
    p.add_argument("--force", action="store_true", help="replace work already there (it is backed up)")
    p.set_defaults(func=practice.cmd_start)
    p = sub.add_parser("prompt", help="a started kata's prompt again (default: the kata in progress)")
    p.add_argument("slug", nargs="?")
    p.set_defaults(func=practice.cmd_prompt)
    p = sub.add_parser("check", help="grade your workspace copy (default: the kata in progress)")
    _grading_args(p)
    p.add_argument("--examples-only", action="store_true", help="run only the README's worked examples")
    p.add_argument(
        "--notebook",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="grade a notebook's solution cells instead (default PATH: workspace/<slug>.ipynb)",
    )
    p.add_argument(
        "--rerun-inconclusive",
        action="store_true",
        help="re-run only the timing tests the last check left inconclusive, and merge them into it",
    )
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("hint", help="the next hint you have not seen")
    p.add_argument("slug", nargs="?")
    p.add_argument("--all", action="store_true", help="show every hint seen so far")
    p.add_argument(
        "--next", action="store_true", help="the next unseen hint in HINTS.md's order, whatever fails"
    )
    p.set_defaults(func=practice.cmd_hint)
    p = sub.add_parser("watch", help="re-grade on every save of your workspace file")
    _grading_args(p)
    p.add_argument("--interval", type=float, default=0.5, help="seconds between looks at the file")
    p.add_argument("--runs", type=int, default=0, help="stop after this many gradings (default: never)")
    p.set_defaults(func=practice.cmd_watch)
    p = sub.add_parser("reset", help="restore the pristine stub (your copy is backed up)")
    p.add_argument("slug")
    p.add_argument("--yes", action="store_true", help="do not ask")
    p.set_defaults(func=practice.cmd_reset)
    p = sub.add_parser("solution", help="show the reference, once the kata has passed")
    p.add_argument("slug")
    p.add_argument("--force", action="store_true", help="show it anyway (recorded as a reveal), after asking")
    p.add_argument("--yes", action="store_true", help="with --force: do not ask")
    p.set_defaults(func=practice.cmd_solution)
    p = sub.add_parser(
        "grade",
        help="grade take-home submissions: folders of <slug>.py or <slug>.ipynb, or notebooks "
        "(kata files found by exact name; links not followed; .py over 1 MiB refused)",
    )
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the full machine-readable report here")
    p.add_argument("--jobs", type=int, default=2, help="gradings at once (default 2)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per kata before grading stops")
    p.add_argument(
        "--seed",
        type=_seed,
        default=None,
        help="the secret seed the graded inputs are drawn from (default: a fresh one, shown after the "
        "table); give a report's seed to replay its inputs",
    )
    p.set_defaults(func=cmd_grade)
    sub.add_parser("status", help="the kata in progress").set_defaults(func=practice.cmd_status)


BUILTIN = ("list", "start", "prompt", "check", "hint", "watch", "reset", "solution", "grade", "status")


def _grading_args(p: argparse.ArgumentParser) -> None:
    from dojo.grading import grade

    p.add_argument("slug", nargs="?", help="kata to grade (default: the kata in progress)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds before grading stops (default {grade.DEFAULT_TIMEOUT_S:g})",
    )


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
    _console().print(f"dojo: warning: {message}", markup=False)


def cmd_check(args) -> int:
    """`dojo check`: a notebook's solution cells with --notebook, or when the kata is only in a notebook
    (dojo.notebook), else the workspace file."""
    from dojo.practice import commands as practice

    if args.notebook is None and not args.rerun_inconclusive and practice.grades_notebook(args.slug):
        args.notebook = ""
    if args.notebook is not None:
        if args.rerun_inconclusive:
            raise UsageError(
                "--rerun-inconclusive re-runs part of a full check of the workspace file: "
                "not with --examples-only or --notebook"
            )
        from dojo.notebook import commands as notebook

        return notebook.run_check(args)
    return practice.cmd_check(args)


def _seed(text: str) -> int:
    """argparse type of --seed: a non-negative integer."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"a seed is a non-negative integer, not {text!r}")
    return int(text)


def cmd_grade(args) -> int:
    from rich.table import Table

    from dojo import catalog
    from dojo.interview import takehome
    from dojo.practice import report

    out = report.console()
    # a PATH that is missing, a plain file or given twice is that PATH's error (in the summary and the
    # report); the other submissions are graded, and the exit status says some failed
    doc = takehome.grade_submissions(
        [Path(p) for p in args.paths], jobs=args.jobs, timeout=args.timeout, seed=args.seed
    )
    if args.json:
        takehome.write_report(doc, args.json)
    submissions = doc["submissions"]
    slugs = [k.slug for k in catalog.load() if any(k.slug in s["katas"] for s in submissions)]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("submission", *slugs, "total", "integrity", "sandboxed"):
        table.add_column(column)
    for sub in submissions:
        cells = []
        for slug in slugs:
            r = sub["katas"].get(slug)
            cells.append(
                "-"
                if r is None
                else "error"
                if r["status"] == "error" and not r["total"]
                else f"{r['points']}/{r['total']}"
                + ("" if r["status"] == "pass" else f" {r['status']}")
                + (f" ({len(r['inconclusive'])} inconclusive)" if r["inconclusive"] else "")
                + (
                    f" (optional {r['optional_points']['points']}/{r['optional_points']['total']})"
                    if r.get("optional_points", {}).get("total")
                    else ""
                )
            )
        note = "" if sub["katas"] else " (errors: see below)" if sub["errors"] else " (no kata files)"
        note += (
            f" ({sub['inconclusive']} inconclusive: timing tests the machine was too noisy to decide, not counted)"
            if sub["inconclusive"]
            else ""
        )
        table.add_row(sub["path"], *cells, f"{sub['points']}/{sub['total']}{note}", *takehome.flags(sub))
    out.print(table, markup=False)
    for line in takehome.findings(doc):
        out.print(line, markup=False)
    out.print(
        f"Inputs drawn from the secret seed {doc['seed']}: `dojo grade --seed {doc['seed']}` replays them.",
        markup=False,
    )
    if args.json:
        out.print(f"Full report: {args.json}", markup=False)
    return 0 if all(s["passed"] for s in submissions) else 1


if __name__ == "__main__":
    sys.exit(main())
