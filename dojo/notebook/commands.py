"""The notebook commands: `dojo notebook <slug>`, `dojo check --notebook [PATH]`, `python -m dojo.notebook`.

`dojo notebook` writes workspace/<slug>.ipynb (dojo.notebook.build); `dojo check --notebook` grades its
saved solution cells (dojo.notebook.grading) and prints the report in cell terms; `python -m
dojo.notebook --render-solutions DIR` (run by `make notebooks`) writes a read-only reference notebook
per kata. Parsing and printing only: the work is in the modules named.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from dojo import catalog
from dojo.errors import UsageError
from dojo.notebook import build as nbbuild
from dojo.notebook.extract import SOLUTION_TAG
from dojo.notebook.grading import check_notebook, kata_of, verdict
from dojo.practice import history, report

DESCRIPTION = "Notebook mode: solve a kata in Jupyter, graded by the same hidden suite as the .py path."


def register(subparsers) -> None:
    p = subparsers.add_parser("notebook", help="write a Jupyter notebook for a kata into your workspace")
    p.add_argument("slug")
    p.add_argument(
        "--force", action="store_true", help="replace a notebook that holds work (it is backed up)"
    )
    p.set_defaults(func=cmd_notebook)


def cmd_notebook(args) -> int:
    out = report.console()
    kata = catalog.get(args.slug)
    result = nbbuild.create(kata, force=args.force)
    history.record_event(kata.slug, "start", "notebook")
    if result.created:
        out.print(f"Wrote {result.path}", markup=False)
        if result.backup:
            out.print(f"Your earlier notebook is backed up at {result.backup}", markup=False)
    elif nbbuild.has_work(kata, result.path):
        out.print(
            f"You already have work on {kata.slug} in {result.path}: kept it "
            f"(`dojo notebook {kata.slug} --force` replaces it with a fresh notebook, after a backup).",
            markup=False,
        )
    else:
        out.print(f"{result.path} is already there, untouched.", markup=False)
    out.print(
        f"Open it in JupyterLab: dojo lab   (then open {result.path.name} in its file browser)", markup=False
    )
    out.print(
        f"Write your code in the cell tagged '{SOLUTION_TAG}', save, and run the last cell to grade it "
        f"(or: dojo check {kata.slug} --notebook).",
        markup=False,
    )
    return 0


def run_check(args) -> int:
    """`dojo check [<slug>] --notebook [PATH]`: grade a notebook (default: workspace/<slug>.ipynb)."""
    path = Path(args.notebook).expanduser() if args.notebook else None
    if args.slug:
        slug = catalog.get(args.slug).slug
    elif path is not None:
        slug = kata_of(path)
    else:
        slug = history.current_kata()
        if slug is None:
            raise UsageError("no kata in progress: name one, as in `dojo check <slug> --notebook`")
    if path is None:
        path = nbbuild.notebook_file(slug)
        if not path.exists():
            raise FileNotFoundError(f"no notebook for '{slug}' at {path}: run `dojo notebook {slug}` first")
    elif path.suffix != ".ipynb":
        raise UsageError(f"{path} is not a notebook (.ipynb)")
    if args.slug and path.is_file():
        try:
            meant = kata_of(path)
        except ValueError:
            meant = slug
        if meant != slug:
            warnings.warn(f"{path.name} was made for kata '{meant}', graded here as '{slug}'", stacklevel=1)
    graded = check_notebook(path, slug, examples_only=args.examples_only, timeout=args.timeout)
    result = graded.result
    out = report.console()
    out.print(graded.saved_line(), markup=False)
    report.show_result(result, out, title=catalog.get(slug).title)
    out.print(verdict(result, slug, in_notebook=False), markup=False)
    return 0 if result.passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dojo.notebook", description=DESCRIPTION)
    parser.add_argument(
        "--render-solutions",
        type=Path,
        metavar="DIR",
        required=True,
        help="write a read-only reference notebook per kata into DIR",
    )
    args = parser.parse_args(argv)
    written = nbbuild.render_solutions(args.render_solutions)
    for path in written:
        print(f"wrote {path}")
    print(
        f"{len(written)} reference notebooks (read-only) in {args.render_solutions}/: "
        f"open them with: dojo lab {args.render_solutions}"
    )
    return 0
