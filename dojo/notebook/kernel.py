"""What the notebook's kernel knows and the saved file does not: which notebook this is, what code it ran.

The grading cell grades the notebook as saved; a kernel cannot read the open editor, only its own
input history. `stale_runs` compares that history with the saved solution cells: the latest run that
defined a saved cell's top-level functions or classes must be that cell's saved text, else the kernel
has run code the grade did not see. `run_time` says when a run was (noted from `record_runs` on: IPython
keeps no times). `this_notebook` finds the notebook the kernel was started for.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dojo.notebook.extract import SOLUTION_TAG

_DEFINED = re.compile(r"^(?:async\s+def|def|class)\s+([A-Za-z_]\w*)", re.MULTILINE)
_IPYTHON_LINE = re.compile(r"^(\s*)[%!].*$", re.MULTILINE)  # a magic or shell line: not Python
GRADING_CALL = "grade_here("  # the grading cell's own runs are not solution code


def defined(source: str) -> set[str]:
    """Names of the functions and classes `source` defines at top level (column 0), parsed or not."""
    return set(_DEFINED.findall(source))


def definitions(source: str) -> dict[str, str] | None:
    """What `source` defines at top level: each name a function, class or assignment binds -> the source of
    the statements binding it (decorators included, joined in order); None when it is not Python even with
    its IPython lines (magics, `!`) left out."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        try:
            tree = ast.parse(_IPYTHON_LINE.sub(r"\1pass", source))
        except (SyntaxError, ValueError):
            return None
    lines = source.split("\n")
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [name for target in node.targets for name in _bound(target)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            names = _bound(node.target)
        else:
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        text = "\n".join(line.rstrip() for line in lines[first - 1 : node.end_lineno])
        for name in names:
            found.setdefault(name, []).append(text)
    return {name: "\n".join(texts) for name, texts in found.items()}


def _bound(target: ast.expr) -> list[str]:
    """The names an assignment target binds (`a, *b = ...` binds a and b; `x.y = ...` binds none)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _bound(element)]
    return []


def changed_definitions(text: str, saved: list[str]) -> list[str] | None:
    """The names run code `text` defines whose source is not what the saved solution cells `saved` hold for
    them (new names included), sorted; None when `text` is not Python."""
    ran = definitions(text)
    if ran is None:
        return None
    held: dict[str, str] = {}
    for cell in saved:
        held.update(definitions(cell) or {})
    return sorted(name for name, source in ran.items() if held.get(name) != source)


def last_solution_run(saved: list[str], runs: list[str]) -> int | None:
    """Index into `runs` (index n = In [n]) of the kernel's latest run of solution code: a run, not of the
    grading cell, that defines a function or class a saved solution cell defines, or is one's whole text.
    None: the kernel has run none."""
    names = set().union(*(defined(cell) for cell in saved))
    texts = {cell.strip() for cell in saved}
    for n in range(len(runs) - 1, -1, -1):
        if GRADING_CALL not in runs[n] and (defined(runs[n]) & names or runs[n].strip() in texts):
            return n
    return None


def stale_runs(saved: list[str], runs: list[str]) -> list[int]:
    """Indexes into `runs` (the kernel's inputs in order, index n = In [n]) of the latest run of each saved
    solution cell's names, where that run is none of the saved solution cells. Empty: the kernel ran what
    was saved (or none of it)."""
    saved_text = {cell.strip() for cell in saved}
    names_run = [set() if GRADING_CALL in run else defined(run) for run in runs]
    stale = set()
    for cell in saved:
        names = defined(cell)
        latest = next((n for n in range(len(runs) - 1, -1, -1) if names_run[n] & names), None)
        if latest is not None and runs[latest].strip() not in saved_text:
            stale.add(latest)
    return sorted(stale)


@dataclass(frozen=True)
class SavedCell:
    """A code cell of the saved notebook, as the warning needs it."""

    number: int  # counted from 1 at the top, markdown cells included (as failures name cells)
    source: str
    count: int | None  # its execution_count as saved: the In [n] of its last run before the save
    solution: bool  # tagged `solution`: graded


def why_stale(run: int, text: str, cells: list[SavedCell]) -> tuple[str, SavedCell | None]:
    """Why In [`run`] (source `text`) is not what was graded: ("scratch", the untagged cell it is),
    ("not run", the solution cell saved since with that run's count) or ("unsaved", None)."""
    scratch = next((c for c in cells if not c.solution and c.source.strip() == text.strip()), None)
    if scratch is not None:
        return "scratch", scratch
    names = defined(text)
    saved = next((c for c in cells if c.solution and c.count == run and defined(c.source) & names), None)
    return ("not run", saved) if saved is not None else ("unsaved", None)


def unsaved_warning(saved: list[str], cells: list[SavedCell] | None = None) -> str | None:
    """The warning for the grade of `saved` (the saved solution cells' sources) while this kernel has run
    other solution code, naming the case when the saved notebook's code `cells` tell it; None when the
    kernel ran what was saved (or none of it), or outside IPython."""
    runs = input_history()
    if runs is None:
        return None
    stale = stale_runs(saved, runs)
    if not stale:
        return None
    if cells is None:
        return (
            f"this kernel last ran solution code ({', '.join(f'In [{n}]' for n in stale)}) that is not what the saved "
            "notebook holds, and the saved notebook is what was graded. Unsaved edits? Save (Ctrl-S / Cmd-S) and run "
            "this cell again. Saved since? Run the solution cell again, so that your scratch cells test what is graded."
        )
    return " ".join(_case(n, runs[n], cells) for n in stale)


def _case(run: int, text: str, cells: list[SavedCell]) -> str:
    why, cell = why_stale(run, text, cells)
    names = ", ".join(sorted(defined(text)))
    if why == "scratch":
        return (
            f"In [{run}] ran cell {cell.number}, which is not tagged '{SOLUTION_TAG}', and redefined {names}: this "
            "kernel uses that definition, the grade does not. Move it into the solution cell, or run the solution "
            "cell again."
        )
    if why == "not run":
        return (
            f"cell {cell.number} was edited and saved since it ran (In [{run}]): the grade is of the saved code, "
            f"but this kernel still holds the old {names}. Run cell {cell.number} again so that your scratch cells "
            "test what is graded."
        )
    changed = changed_definitions(text, [c.source for c in cells if c.solution])
    if changed is None:  # not Python: it defined nothing, yet the editor holds it unsaved
        ran = f"a version of {names or 'the solution'} that does not parse and is"
    elif changed:
        ran = f"{', '.join(changed)} as {'it is' if len(changed) == 1 else 'they are'}"
    else:
        ran = "solution code whose definitions are the saved ones but whose other lines are"
    return (
        f"unsaved edits: In [{run}] ran {ran} in no saved cell, so the grade did not see it. "
        "Save (Ctrl-S / Cmd-S) and run this cell again."
    )


def input_history() -> list[str] | None:
    """This kernel's inputs in order (index n = In [n]), or None outside IPython."""
    shell = _shell()
    return None if shell is None else list(shell.history_manager.input_hist_raw)


def record_runs() -> None:
    """From now on, note when this kernel starts each run (In [n]), for `run_time`; once per kernel, nothing
    outside IPython. IPython keeps no times of its own, so earlier runs are known only to follow the kernel's
    start."""
    shell = _shell()
    if shell is None or hasattr(shell, "_dojo_run_times"):
        return
    times: dict[int, float] = {}
    shell._dojo_run_times = times  # on the shell, not this module: it outlives a reload of dojo
    started: list[float | None] = [None]  # when the run under way started (None: before this was called)

    def start(info=None):
        started[0] = time.time()

    def note(result=None):  # subtle: only the result knows the run's In [n] (IPython 9 counts before it runs)
        if started[0] is not None and getattr(result, "execution_count", None) is not None:
            times[result.execution_count] = started[0]
        started[0] = None

    shell.events.register("pre_run_cell", start)
    shell.events.register("post_run_cell", note)


def run_time(run: int) -> tuple[float, bool] | None:
    """When In [`run`] started: (time, True) where `record_runs` noted it, else (the kernel's start, False),
    a lower bound; None outside IPython or where neither is known."""
    shell = _shell()
    if shell is None:
        return None
    noted = getattr(shell, "_dojo_run_times", {}).get(run)
    if noted is not None:
        return noted, True
    try:
        import psutil  # ipykernel's own dependency
    except ImportError:
        return None
    return psutil.Process().create_time(), False


def this_notebook(slug: str | None, path: str | Path | None) -> Path:
    """The notebook to grade: `path`, else the one the kernel was started for (Jupyter's __session__,
    VS Code's __vsc_ipynb_file__), else <slug>.ipynb in the working directory. FileNotFoundError if none."""
    if path is not None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no notebook at {path}")
        return Path(path)
    shell = _shell()
    ns = shell.user_ns if shell is not None else {}
    candidates = [ns.get("__session__"), os.environ.get("JPY_SESSION_NAME"), ns.get("__vsc_ipynb_file__")]
    if slug:
        candidates.append(str(Path.cwd() / f"{slug}.ipynb"))
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.endswith(".ipynb") and Path(candidate).is_file():
            return Path(candidate)
    raise FileNotFoundError(
        'cannot tell which notebook this is: pass it, as in grade_here("<kata>", "path/to/<kata>.ipynb")'
    )


def _shell():
    """The running IPython shell, or None (without importing IPython where it is not loaded)."""
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()
