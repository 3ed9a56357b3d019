"""Notebook mode: solve a kata in Jupyter, graded by the same hidden suite as the .py path.

`dojo notebook <slug>` writes workspace/<slug>.ipynb: the kata's prompt, the stub in a code cell
tagged `solution`, a scratch cell, and a last cell calling `grade_here()`, which grades the saved
notebook and shows the report inline (HTML with a plain-text fallback, never terminal codes).
`grade_notebook()` turns the solution cells into a temporary module (dojo.nbextract), grades it
with dojo.grade like any .py file, then rewrites the report to name the notebook and its cells
("cell 3, line 5") instead of the temporary file. `dojo check <slug> --notebook [PATH]` and
`dojo grade PATH.ipynb` go through it. `python -m dojo.notebook --render-solutions DIR` (run by
`make notebooks`) writes a read-only reference notebook per kata from solutions/.
Not done: grading the unsaved state of an open notebook (a kernel cannot read it); instead the
grading cell warns when the solution code last run differs from the saved notebook.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from rich.console import Console
from rich.text import Text

from dojo import catalog, grade, history, nbextract, report, workspace
from dojo.catalog import Kata
from dojo.grade import GradeResult
from dojo.nbextract import SOLUTION_TAG, NotebookError

__all__ = [
    "NotebookError", "NotebookReport", "build", "check_notebook", "create", "grade_here", "grade_notebook",
    "kata_of", "notebook_file", "register", "render_solutions",
]

KERNELSPEC = {"name": "decode-dojo", "display_name": "decode-dojo (.venv)", "language": "python"}
GRADE_TAG = "grade"
HTML_FORMAT = (
    '<pre style="white-space: pre-wrap; font-family: Menlo, Consolas, \'DejaVu Sans Mono\', monospace; '
    'font-size: 0.9em; line-height: 1.35">{code}</pre>'
)


# ---- making notebooks --------------------------------------------------------------------------


def notebook_file(slug: str) -> Path:
    """workspace/<slug>.ipynb"""
    return workspace.workspace_dir() / f"{slug}.ipynb"


def build(kata: Kata, code: str, *, reference: bool = False) -> dict:
    """The notebook of `kata` with `code` in its solution cell; `reference`: read-only cells, ungraded runs."""
    slug = kata.slug
    if reference:
        how = (
            f"**Reference solution** (read-only), rendered by `make notebooks` from `solutions/{slug}.py`. "
            f"To solve the kata yourself: `dojo notebook {slug}`. The last cell grades this notebook with the "
            "hidden suite, as it would grade yours (without recording an attempt)."
        )
        call = f'grade_here("{slug}", record=False)'
    else:
        how = (
            f"**How this notebook is graded.** Write your solution in the code cell tagged `{SOLUTION_TAG}` "
            f"(below). Only cells tagged `{SOLUTION_TAG}` are graded, joined in notebook order: tag more "
            "cells if you split your code (JupyterLab: the gear icon on the right > Cell Tags). Other cells, "
            "magics and `!` lines are yours to experiment with. **Save** the notebook (Ctrl-S / Cmd-S), then "
            f"run the last cell: it grades the saved notebook with the hidden suite of `dojo check {slug}` and "
            f"records the attempt. From a terminal: `dojo check {slug} --notebook`. Failures name cells counted "
            "from 1 at the top, markdown cells included."
        )
        call = f'grade_here("{slug}")'
    locked = {"editable": False, "deletable": False} if reference else {}
    grade_cell = (
        '# Grades the SAVED notebook (save first). Needs the kernel "decode-dojo (.venv)".\n'
        f"from dojo.notebook import grade_here\n\n{call}"
    )
    return {
        "cells": [
            _cell("markdown", "prompt", kata.readme().strip(), locked),
            _cell("markdown", "how", how, locked),
            _cell("code", "solution", code.rstrip("\n"), {"tags": [SOLUTION_TAG], **locked}),
            _cell("code", "scratch", "# Scratch: try your code here. Not graded.\n", locked),
            _cell("code", "grade", grade_cell, {"tags": [GRADE_TAG], **locked}),
        ],
        "metadata": {
            "kernelspec": dict(KERNELSPEC),
            "language_info": {"name": "python"},
            "dojo": {"kata": slug, "format": 1, "reference": reference},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _cell(kind: str, cell_id: str, source: str, metadata: dict) -> dict:
    """One nbformat 4.5 cell (plain JSON: nbformat itself takes a second to import)."""
    cell = {"cell_type": kind, "id": cell_id, "metadata": dict(metadata), "source": source}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def create(kata: Kata, *, force: bool = False) -> workspace.StartResult:
    """Write workspace/<slug>.ipynb for `kata` with the stub in its solution cell.

    A notebook already there is kept (created=False) unless `force`, and then only replaced when it holds
    work (code that differs from a fresh notebook's), after a backup. Raises FileNotFoundError without a stub.
    """
    if not kata.stub.is_file():
        raise FileNotFoundError(f"kata {kata.slug!r} has no stub yet at {kata.stub}")
    path = notebook_file(kata.slug)
    backup = None
    if path.exists():
        if not force or not has_work(kata, path):
            return workspace.StartResult(path, created=False)
        backup = _backup(path)
    _write(build(kata, kata.stub.read_text()), path)
    return workspace.StartResult(path, created=True, backup=backup)


def has_work(kata: Kata, path: Path) -> bool:
    """Whether the notebook at `path` holds code other than a fresh notebook's (unreadable counts as work)."""
    try:
        nb = nbextract.read(path)
    except (NotebookError, FileNotFoundError):
        return path.exists()
    fresh = build(kata, kata.stub.read_text())
    return _code(nb) != _code(fresh)


def _code(nb: dict) -> list[str]:
    return [nbextract.source(c).strip() for c in nb["cells"] if c.get("cell_type") == "code"]


def _backup(path: Path) -> Path:
    folder = workspace.backups_dir()
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dst, n = folder / f"{path.stem}-{stamp}.ipynb", 1
    while dst.exists():
        dst, n = folder / f"{path.stem}-{stamp}-{n}.ipynb", n + 1
    shutil.copy2(path, dst)
    return dst


def _write(nb, path: Path, *, mode: int | None = None) -> None:
    """Write `nb` (a notebook's JSON document) atomically; `mode`: file permissions to set."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(nb, f, indent=1, ensure_ascii=False)
            f.write("\n")
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render_solutions(dest: Path) -> list[Path]:
    """A read-only reference notebook per kata that has a reference, in `dest`; returns their paths."""
    written = []
    for kata in catalog.load():
        if not kata.reference.is_file():
            continue
        path = dest / f"{kata.slug}.ipynb"
        _write(build(kata, kata.reference.read_text(), reference=True), path, mode=0o444)
        written.append(path)
    return written


# ---- grading -----------------------------------------------------------------------------------


def kata_of(path: Path, nb=None) -> str:
    """The kata a notebook is for: its metadata (written by `dojo notebook`), else its file name."""
    path = Path(path)
    if nb is None:
        try:
            nb = nbextract.read(path)
        except NotebookError:
            nb = None
    slug = ((nb or {}).get("metadata") or {}).get("dojo", {}).get("kata")
    if slug:
        return catalog.get(slug).slug
    if path.stem in catalog.slugs():
        return path.stem
    raise NotebookError(
        f"cannot tell which kata {path.name} is for: name it <kata>.ipynb, or give the kata: "
        f"dojo check <kata> --notebook {path}"
    )


def grade_notebook(
    path: Path,
    slug: str | None = None,
    *,
    examples_only: bool = False,
    timeout: float | None = None,
    test_timeout: float | None = None,
    memory_limit: int | None = None,
    sandboxed: bool = False,
) -> GradeResult:
    """Grade the solution cells of the notebook at `path` with the hidden suite of `slug` (default: the
    notebook's kata). A notebook that cannot be graded (not a notebook, no solution cell, a syntax error)
    gives a result whose `error` names the cell; FileNotFoundError when there is no notebook at `path`."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}")
    slug = catalog.get(slug).slug if slug else kata_of(path)
    kata = catalog.get(slug)
    if not kata.has_suite:
        raise grade.NoSuite(f"kata {slug!r} has no tests yet ({kata.suite} is missing)")
    started = time.time()
    try:
        extracted = nbextract.extract(nbextract.read(path), path.name)
    except NotebookError as exc:
        return GradeResult(
            slug=slug, target=str(path), path=str(path), tests=[], points=0, total=0, passed=False,
            duration=time.time() - started, started=started, error=str(exc), examples_only=examples_only,
        )
    with tempfile.TemporaryDirectory(prefix=f"dojo-notebook-{slug}-") as tmp:
        module = nbextract.write_module(extracted, Path(tmp) / f"{slug}_ipynb.py")
        result = grade.grade(
            slug, str(module), examples_only=examples_only, timeout=timeout, test_timeout=test_timeout,
            memory_limit=memory_limit, sandboxed=sandboxed,
        )
    return _in_notebook_terms(result, extracted, module, path)


def _in_notebook_terms(result: GradeResult, extracted: nbextract.Extracted, module: Path, path: Path) -> GradeResult:
    """`result` with the temporary module's name and lines replaced by the notebook's name and cells."""
    tests = []
    for test in result.tests:
        message = extracted.rewrite(test.message, module)
        if "NameError: name" in message:  # the notebook pitfall: defined in a cell that is not graded
            message += f"\n(only cells tagged '{SOLUTION_TAG}' are graded: is that name defined in another cell?)"
        tests.append(dataclasses.replace(test, message=message))
    return dataclasses.replace(
        result, target=str(path), path=str(path), tests=tests,
        error=extracted.rewrite(result.error, module) if result.error else result.error,
        output=extracted.rewrite(result.output, module),
        notes=[extracted.rewrite(note, module) for note in result.notes],
        integrity=[extracted.rewrite(finding, module) for finding in result.integrity],
    )


def check_notebook(path: Path, slug: str | None = None, *, examples_only: bool = False,
                   timeout: float | None = None) -> GradeResult:
    """The practice loop's step for a notebook: grade it, write results/<slug>.json, record the attempt."""
    result = grade_notebook(path, slug, examples_only=examples_only, timeout=timeout)
    report.write_results(result, workspace.results_file(result.slug))
    history.record_result(result, mode="check")
    return result


def verdict(result: GradeResult, slug: str, *, in_notebook: bool) -> str:
    """One closing line: what to do next."""
    again = "run this cell again" if in_notebook else f"run `dojo check {slug} --notebook` again"
    if result.passed and not result.examples_only:
        return f"All tests pass. `dojo solution {slug}` shows the reference to compare with."
    if result.passed:
        return f"The README examples pass. `dojo check {slug} --notebook` runs the full hidden suite."
    return f"Keep going: edit the solution cell, save the notebook, and {again} (`dojo hint {slug}` if stuck)."


# ---- in the notebook ---------------------------------------------------------------------------


class NotebookReport:
    """A grading shown in a notebook: HTML for Jupyter (`_repr_html_`), plain text elsewhere (`repr`)."""

    def __init__(self, result: GradeResult | None = None, *, error: str | None = None, warning: str | None = None,
                 title: str = ""):
        self.result, self.error, self.warning = result, error, warning
        con = Console(
            record=True, file=io.StringIO(), width=100, color_system="truecolor", force_terminal=True,
            force_jupyter=False, highlight=False, soft_wrap=True, emoji=False,
        )
        if warning:
            con.print(Text(f"Note: {warning}", style="yellow"))
        if result is not None:
            report.show_result(result, con, title=title)
            con.print(verdict(result, result.slug, in_notebook=True))
        if error:
            con.print(Text(f"Cannot grade: {error}", style="bold red"))
        self.html = con.export_html(inline_styles=True, code_format=HTML_FORMAT, clear=False)
        self.text = con.export_text().rstrip("\n")

    @property
    def passed(self) -> bool:
        return self.result is not None and self.result.passed

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


def grade_here(slug: str | None = None, path: str | Path | None = None, *, record: bool = True,
               examples_only: bool = False, timeout: float | None = None) -> NotebookReport:
    """What a kata notebook's last cell calls: grade this (saved) notebook and show the report.

    The notebook is `path`, else the one the kernel was started for (Jupyter's __session__, VS Code's
    __vsc_ipynb_file__), else <slug>.ipynb in the working directory. `record`: write results and record the
    attempt, as `dojo check` does. Problems come back as a report saying what is wrong, not a traceback.
    """
    try:
        where = _this_notebook(slug, path)
        slug = slug or kata_of(where)
        kata = catalog.get(slug)
        grader = check_notebook if record else grade_notebook
        result = grader(where, slug, examples_only=examples_only, timeout=timeout)
    except (FileNotFoundError, ValueError, history.ProgressDBError) as exc:  # NotebookError and UnknownKata are ValueErrors
        return NotebookReport(error=str(exc))
    return NotebookReport(result, warning=_unsaved_warning(where), title=kata.title)


def _this_notebook(slug: str | None, path: str | Path | None) -> Path:
    if path is not None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no notebook at {path}")
        return Path(path)
    ns = _user_ns()
    candidates = [ns.get("__session__"), os.environ.get("JPY_SESSION_NAME"), ns.get("__vsc_ipynb_file__")]
    if slug:
        candidates.append(str(Path.cwd() / f"{slug}.ipynb"))
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.endswith(".ipynb") and Path(candidate).is_file():
            return Path(candidate)
    raise FileNotFoundError(
        "cannot tell which notebook this is: pass it, as in grade_here(\"<kata>\", \"path/to/<kata>.ipynb\")"
    )


def _user_ns() -> dict:
    shell = _shell()
    return shell.user_ns if shell is not None else {}


def _shell():
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()


def _unsaved_warning(path: Path) -> str | None:
    """A warning when the solution code this kernel last ran differs from the saved notebook's (which is what
    was graded): most likely edits not saved yet. None outside IPython or when they agree."""
    shell = _shell()
    if shell is None:
        return None
    try:
        saved = [nbextract.source(c).strip() for c in nbextract.read(path)["cells"] if nbextract.is_solution(c)]
    except (NotebookError, FileNotFoundError):
        return None
    names = set().union(*(_defined(source) for source in saved)) if saved else set()
    for entry in reversed(list(shell.history_manager.input_hist_raw)):
        if "grade_here(" in entry:
            continue  # this cell
        if _defined(entry) & names:
            if entry.strip() in saved:
                return None
            return (
                "the code you last ran for the solution differs from the saved notebook, and the saved one is "
                "what was graded. Unsaved edits? Save (Ctrl-S / Cmd-S) and run this cell again."
            )
    return None


def _defined(source: str) -> set[str]:
    """Names of the functions and classes `source` defines at top level (empty when it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


# ---- command line ------------------------------------------------------------------------------


def register(subparsers) -> None:
    p = subparsers.add_parser("notebook", help="write a Jupyter notebook for a kata into your workspace")
    p.add_argument("slug")
    p.add_argument("--force", action="store_true", help="replace a notebook that holds work (it is backed up)")
    p.set_defaults(func=cmd_notebook)


def cmd_notebook(args) -> int:
    out = report.console()
    kata = catalog.get(args.slug)
    result = create(kata, force=args.force)
    history.record_event(kata.slug, "start", "notebook")
    if result.created:
        out.print(f"Wrote {result.path}", markup=False)
        if result.backup:
            out.print(f"Your earlier notebook is backed up at {result.backup}", markup=False)
    elif has_work(kata, result.path):
        out.print(f"You already have work on {kata.slug} in {result.path}: kept it "
                  f"(`dojo notebook {kata.slug} --force` replaces it with a fresh notebook, after a backup).", markup=False)
    else:
        out.print(f"{result.path} is already there, untouched.", markup=False)
    out.print(f"Open it: {_jupyter()} lab {result.path}", markup=False)
    out.print(f"Write your code in the cell tagged '{SOLUTION_TAG}', save, and run the last cell to grade it "
              f"(or: dojo check {kata.slug} --notebook).", markup=False)
    return 0


def run_check(args) -> int:
    """`dojo check [<slug>] --notebook [PATH]`: grade a notebook (default: workspace/<slug>.ipynb)."""
    from dojo.cli import UsageError

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
        path = notebook_file(slug)
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
    result = check_notebook(path, slug, examples_only=args.examples_only, timeout=args.timeout)
    out = report.console()
    report.show_result(result, out, title=catalog.get(slug).title)
    out.print(verdict(result, slug, in_notebook=False), markup=False)
    return 0 if result.passed else 1


def _jupyter() -> str:
    local = Path(sys.executable).parent / "jupyter"
    return str(local) if local.exists() else "jupyter"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dojo.notebook", description=__doc__.splitlines()[0])
    parser.add_argument("--render-solutions", type=Path, metavar="DIR", required=True,
                        help="write a read-only reference notebook per kata into DIR")
    args = parser.parse_args(argv)
    written = render_solutions(args.render_solutions)
    for path in written:
        print(f"wrote {path}")
    print(f"{len(written)} reference notebooks (read-only) in {args.render_solutions}/: "
          f"open them with {_jupyter()} lab {args.render_solutions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
