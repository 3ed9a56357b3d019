"""Grading a notebook: its saved solution cells, by the same hidden suite as the .py path, reported in cells.

`grade_notebook()` turns the solution cells into a temporary module (dojo.notebook.extract), grades it
with dojo.grading.grade, and rewrites the report to name the notebook's cells ("cell 3, line 5").
`grade_here()` is what a kata notebook's last cell calls: the report leads with the version graded (a
warning in its place when the kernel ran solution code after that save) and warns while the kernel has run
other solution code (dojo.notebook.kernel). It grades the saved file only.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

from dojo import catalog
from dojo.grading import grade
from dojo.grading.result import GradeResult
from dojo.notebook import extract as nbextract
from dojo.notebook import kernel as nbkernel
from dojo.notebook.display import NotebookReport, saved_line, stale_line
from dojo.notebook.extract import SOLUTION_TAG, NotebookError
from dojo.practice import history, report, workspace

# A save more than this older than the kernel's last run of solution code was followed by more work (why 5 s:
# docs/notebooks.md); within it, a save and a run in quick succession in either order are not flagged.
STALE_AFTER_S = 5.0


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


@dataclasses.dataclass(frozen=True)
class Graded:
    """A grade of a notebook, and the version of the file it graded."""

    result: GradeResult
    saved_at: float  # the graded file's modification time (seconds since the epoch): when it was saved
    solution: list[str]  # the graded solution cells' sources, in order
    cells: list[nbkernel.SavedCell] = dataclasses.field(default_factory=list)  # the saved code cells
    locked: bool = False  # every solution cell is read-only (a reference notebook): no edits to miss

    def saved_line(self, now: float | None = None) -> str:
        """The line that says which version was graded: "Graded toy.ipynb as saved at 10:42:07, 3 min ago"."""
        return saved_line(Path(self.result.path).name, self.saved_at, now)


def grade_notebook(
    path: Path,
    slug: str | None = None,
    *,
    examples_only: bool = False,
    timeout: float | None = None,
    test_timeout: float | None = None,
    memory_limit: int | None = None,
    sandboxed: bool = False,
    seed: int | None = None,
) -> GradeResult:
    """Grade the solution cells of the notebook at `path` with the hidden suite of `slug` (default: the
    notebook's kata). A notebook that cannot be graded (not a notebook, no solution cell, a syntax error)
    gives a result whose `error` names the cell; FileNotFoundError when there is no notebook at `path`."""
    return grade_saved(
        path,
        slug,
        examples_only=examples_only,
        timeout=timeout,
        test_timeout=test_timeout,
        memory_limit=memory_limit,
        sandboxed=sandboxed,
        seed=seed,
    ).result


def grade_saved(
    path: Path,
    slug: str | None = None,
    *,
    examples_only: bool = False,
    timeout: float | None = None,
    test_timeout: float | None = None,
    memory_limit: int | None = None,
    sandboxed: bool = False,
    seed: int | None = None,
) -> Graded:
    """grade_notebook(), with the version of the file graded: when it was saved, its solution cells."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}")
    slug = catalog.get(slug).slug if slug else kata_of(path)
    kata = catalog.get(slug)
    if not kata.has_suite:
        raise grade.NoSuite(f"kata {slug!r} has no tests yet ({kata.suite} is missing)")
    started = time.time()
    saved_at, solution = path.stat().st_mtime, []
    try:
        nb, saved_at = _read_version(path)
        solution = [nbextract.source(c) for c in nb["cells"] if nbextract.is_solution(c)]
        cells = [
            nbkernel.SavedCell(n, nbextract.source(c), c.get("execution_count"), nbextract.is_solution(c))
            for n, c in enumerate(nb["cells"], 1)
            if c.get("cell_type") == "code"
        ]
        extracted = nbextract.extract(nb, path.name)
    except NotebookError as exc:
        result = GradeResult(
            slug=slug,
            target=str(path),
            path=str(path),
            tests=[],
            points=0,
            total=0,
            passed=False,
            duration=time.time() - started,
            started=started,
            error=str(exc),
            examples_only=examples_only,
        )
        return Graded(result, saved_at, solution)
    with tempfile.TemporaryDirectory(prefix=f"dojo-notebook-{slug}-") as tmp:
        module = nbextract.write_module(extracted, Path(tmp) / f"{slug}_ipynb.py")
        result = grade.grade(
            slug,
            str(module),
            examples_only=examples_only,
            timeout=timeout,
            test_timeout=test_timeout,
            memory_limit=memory_limit,
            sandboxed=sandboxed,
            seed=seed,
        )
    locked = all(
        (c.get("metadata") or {}).get("editable") is False for c in nb["cells"] if nbextract.is_solution(c)
    )
    return Graded(_in_notebook_terms(result, extracted, module, path), saved_at, solution, cells, locked)


def _read_version(path: Path) -> tuple[dict, float]:
    """The notebook at `path` and its modification time, both of one version of the file: Jupyter saves by
    replacing the file, so a save while it is read means reading it again. Raises NotebookError."""
    for _ in range(3):
        saved_at = path.stat().st_mtime
        nb = nbextract.read(path)
        if path.stat().st_mtime == saved_at:
            break
    return nb, saved_at


def _in_notebook_terms(
    result: GradeResult, extracted: nbextract.Extracted, module: Path, path: Path
) -> GradeResult:
    """`result` with the temporary module's name and lines replaced by the notebook's name and cells."""
    tests = []
    for test in result.tests:
        message = extracted.rewrite(test.message, module)
        if "NameError: name" in message:  # the notebook pitfall: defined in a cell that is not graded
            message += (
                f"\n(only cells tagged '{SOLUTION_TAG}' are graded: is that name defined in another cell?)"
            )
        tests.append(dataclasses.replace(test, message=message))
    return dataclasses.replace(
        result,
        target=str(path),
        path=str(path),
        tests=tests,
        error=extracted.rewrite(result.error, module) if result.error else result.error,
        output=extracted.rewrite(result.output, module),
        notes=[extracted.rewrite(note, module) for note in result.notes],
        integrity=[extracted.rewrite(finding, module) for finding in result.integrity],
    )


def stale_save(graded: Graded) -> str | None:
    """The report's first line when this kernel's last run of solution code is more than STALE_AFTER_S
    newer than the saved notebook graded (the editor likely holds newer code): None when it is not, the
    solution is locked, or outside IPython."""
    if graded.locked:
        return None
    runs = nbkernel.input_history()
    run = nbkernel.last_solution_run(graded.solution, runs) if runs else None
    ran = nbkernel.run_time(run) if run is not None else None
    if ran is None or ran[0] - graded.saved_at <= STALE_AFTER_S:
        return None
    return stale_line(graded.saved_at, run, ran[0] - graded.saved_at, at_least=not ran[1])


def check_notebook(
    path: Path, slug: str | None = None, *, examples_only: bool = False, timeout: float | None = None
) -> Graded:
    """The practice loop's step for a notebook: grade it, write results/<slug>.json, record the attempt."""
    graded = grade_saved(path, slug, examples_only=examples_only, timeout=timeout)
    report.write_results(graded.result, workspace.results_file(graded.result.slug))
    history.record_result(graded.result, mode="check")
    return graded


def verdict(result: GradeResult, slug: str, *, in_notebook: bool) -> str:
    """One closing line: what to do next."""
    again = "run this cell again" if in_notebook else f"run `dojo check {slug} --notebook` again"
    if result.passed and not result.examples_only:
        return f"{report.all_pass(result)} `dojo solution {slug}` shows the reference to compare with."
    if result.passed:
        return f"The README examples pass. `dojo check {slug} --notebook` runs the full hidden suite."
    return (
        f"Keep going: edit the solution cell, save the notebook, and {again} (`dojo hint {slug}` if stuck)."
    )


# ---- in the notebook ---------------------------------------------------------------------------


def grade_here(
    slug: str | None = None,
    path: str | Path | None = None,
    *,
    record: bool = True,
    examples_only: bool = False,
    timeout: float | None = None,
) -> NotebookReport:
    """What a kata notebook's last cell calls: grade this (saved) notebook and show the report.

    The notebook is `path`, else the one the kernel was started for (see dojo.notebook.kernel.this_notebook).
    `record`: write results and record the attempt, as `dojo check` does. The report leads with the version
    graded ("as saved at ...", a warning in its place when this kernel ran solution code more than
    STALE_AFTER_S after that save) and warns while this kernel has run solution code other than the saved. Problems come back
    as a report saying what is wrong, not a traceback.
    """
    nbkernel.record_runs()  # times this kernel's runs from now on (IPython keeps none)
    try:
        where = nbkernel.this_notebook(slug, path)
        slug = slug or kata_of(where)
        kata = catalog.get(slug)
        grader = check_notebook if record else grade_saved
        graded = grader(where, slug, examples_only=examples_only, timeout=timeout)
    except (
        FileNotFoundError,
        ValueError,
        history.ProgressDBError,
    ) as exc:  # NotebookError and UnknownKata are ValueErrors
        return NotebookReport(error=str(exc))
    return NotebookReport(
        graded.result,
        saved=graded.saved_line(),
        stale=stale_save(graded),
        warning=nbkernel.unsaved_warning(graded.solution, graded.cells),
        verdict=verdict(graded.result, slug, in_notebook=True),
        title=kata.title,
    )
