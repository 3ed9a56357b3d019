"""A notebook's `solution`-tagged cells as one Python module, with a map from its lines back to cells.

`extract()` joins the code cells tagged `solution`, in notebook order, into a module the hidden suite
can import by path, and remembers where each line came from: `where(42)` says "cell 3, line 5" and
`rewrite()` turns file:line references in failure messages into cells. IPython-only lines become
`pass`. Problems (no solution cell, a syntax error) raise NotebookError naming the notebook and cell.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

SOLUTION_TAG = "solution"
# Cell magics whose body is Python run as is: the magic line is dropped, the body kept.
PYTHON_CELL_MAGICS = ("time", "timeit", "capture", "prun")
MAX_CELLS = 10_000  # solution_only refuses a notebook with more (its copy keeps one entry per cell)
_MAGIC = re.compile(r"^(\s*)([%!].*)$")


class NotebookError(ValueError):
    """The notebook cannot be graded: unreadable, no solution cell, or a syntax error (the message names the cell)."""


@dataclass
class Extracted:
    """The solution cells of one notebook as module source."""

    notebook: str  # the notebook's file name, for messages
    source: str
    cells: list[int]  # 1-based numbers of the solution cells, in order
    line_map: list[tuple[int, int] | None] = field(
        default_factory=list
    )  # module line - 1 -> (cell, line in cell)

    def locate(self, lineno: int) -> tuple[int, int] | None:
        """(cell, line in that cell) of module line `lineno` (1-based), or None for a line dojo added."""
        if 1 <= lineno <= len(self.line_map):
            return self.line_map[lineno - 1]
        return None

    def where(self, lineno: int) -> str:
        """ "cell 3, line 5" for module line `lineno`."""
        spot = self.locate(lineno)
        return f"cell {spot[0]}, line {spot[1]}" if spot else f"line {lineno} of the extracted module"

    def rewrite(self, text: str, module: Path) -> str:
        """`text` (a failure message, pytest output) with references to the module's lines as notebook cells."""
        if not text:
            return text
        path, name = re.escape(str(module)), re.escape(module.name)
        text = re.sub(rf'File "{path}", line (\d+)', lambda m: self.where(int(m.group(1))), text)
        text = re.sub(rf"(?:{path}|(?<![\w/.-]){name}):(\d+)", lambda m: self.where(int(m.group(1))), text)
        return re.sub(rf"{path}|(?<![\w/.-]){name}", self.notebook, text)


def read(path: Path) -> dict:
    """The notebook at `path` as its JSON document (nbformat 4: "cells", "metadata"). Plain json, not
    nbformat, whose schema validation costs a second of start-up. Raises FileNotFoundError, or
    NotebookError when the file is not a version 4 notebook."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise NotebookError(f"{path.name} is not a readable Jupyter notebook: {exc}") from exc
    return parse(text, path.name)


def parse(text: str, name: str) -> dict:
    """The notebook whose file (called `name` in messages) holds `text`, as read() returns it. Raises NotebookError."""
    try:
        nb = json.loads(text)
    except ValueError as exc:
        raise NotebookError(f"{name} is not a readable Jupyter notebook: {exc}") from exc
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        raise NotebookError(f"{name} is not a readable Jupyter notebook (version 4, with a list of cells)")
    return nb


def solution_only(text: str, name: str) -> dict:
    """What grading needs of the notebook in `text` (called `name`), as plain data: {"kata": the kata its
    metadata names, or None; "source": the extracted module's source; "notebook": the notebook with every
    cell but the solution cells emptied (cell numbers kept) and no outputs}. dojo.interview.takehome runs
    this on a candidate's file in a bounded child (dojo.grading.confine.bounded). Raises NotebookError."""
    nb = parse(text, name)
    if len(nb["cells"]) > MAX_CELLS:
        raise NotebookError(f"{name} has {len(nb['cells'])} cells, over {MAX_CELLS}: not a kata notebook")
    cells = [c if isinstance(c, dict) else {} for c in nb["cells"]]
    source_ = extract({"cells": cells}, name).source
    kata = ((nb.get("metadata") or {}).get("dojo") or {}) if isinstance(nb.get("metadata"), dict) else {}
    kata = kata.get("kata") if isinstance(kata, dict) and isinstance(kata.get("kata"), str) else None
    kept = [
        {
            "cell_type": "code",
            "metadata": {"tags": [SOLUTION_TAG]},
            "source": source(c),
            "outputs": [],
            "execution_count": None,
        }
        if is_solution(c)
        else {"cell_type": "raw", "metadata": {}, "source": ""}
        for c in cells
    ]
    sanitized = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"dojo": {"kata": kata}} if kata else {},
        "cells": kept,
    }
    return {"kata": kata, "source": source_, "notebook": sanitized}


def source(cell: dict) -> str:
    """A cell's source text (the file may store it as a list of lines)."""
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def is_solution(cell: dict) -> bool:
    return cell.get("cell_type") == "code" and SOLUTION_TAG in (cell.get("metadata") or {}).get("tags", [])


def extract(nb: dict, name: str = "notebook") -> Extracted:
    """Join the code cells tagged `solution` of `nb` (called `name` in messages) into module source.

    Raises NotebookError when no code cell is tagged `solution`, or a solution cell is not valid Python.
    """
    chosen = [(number, cell) for number, cell in enumerate(nb["cells"], start=1) if is_solution(cell)]
    if not chosen:
        raise NotebookError(
            f"{name} has no code cell tagged '{SOLUTION_TAG}': tag the cell holding your code "
            f"(JupyterLab: the gear icon on the right > Cell Tags), or make a fresh notebook with `dojo notebook <kata>`"
        )
    header = f'# The cells tagged "{SOLUTION_TAG}" in {name} (cells {", ".join(str(n) for n, _ in chosen)}), extracted by dojo.'
    lines: list[str] = [header]
    line_map: list[tuple[int, int] | None] = [None]
    for i, (number, cell) in enumerate(chosen):
        code = _python_only(source(cell), number, name)
        _compile(code, number, name)
        if i:
            lines += ["", f"# --- cell {number} ---"]
            line_map += [None, None]
        cell_lines = code.split("\n")
        lines += cell_lines
        line_map += [(number, j) for j in range(1, len(cell_lines) + 1)]
    extracted = Extracted(name, "\n".join(lines).rstrip("\n") + "\n", [n for n, _ in chosen], line_map)
    try:  # the cells may each be valid yet not together (a __future__ import in a later cell)
        compile(extracted.source, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        spot = extracted.locate(exc.lineno or 0)
        cell, line = spot if spot else (chosen[-1][0], None)
        raise NotebookError(_syntax_message(name, cell, line, exc)) from None
    return extracted


def write_module(extracted: Extracted, dest: Path) -> Path:
    """Write the module source to `dest` (a .py path) and return it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(extracted.source)
    return dest


def _python_only(source: str, number: int, name: str) -> str:
    """The cell's source with IPython-only lines replaced by `pass` (same line count)."""
    lines = source.split("\n")
    if lines and lines[0].lstrip().startswith("%%"):
        magic = lines[0].strip()[2:].split(maxsplit=1)[0] if lines[0].strip()[2:] else ""
        if magic not in PYTHON_CELL_MAGICS:
            raise NotebookError(
                f"{name}: cell {number} (tagged '{SOLUTION_TAG}') starts with the cell magic %%{magic}, so its body "
                "is not Python: move that to an untagged cell"
            )
        lines[0] = f"pass  # dojo: left out {lines[0].strip()}"
    try:
        compile("\n".join(lines), "cell", "exec", dont_inherit=True)
        return "\n".join(lines)  # valid Python: leave every line alone (a % inside a string stays)
    except SyntaxError:
        pass
    out = []
    for line in lines:
        m = _MAGIC.match(line)
        out.append(f"{m.group(1)}pass  # dojo: left out an IPython line" if m else line)
    return "\n".join(out)


def _compile(code: str, number: int, name: str) -> None:
    try:
        compile(code, f"cell {number}", "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise NotebookError(_syntax_message(name, number, exc.lineno, exc)) from None


def _syntax_message(name: str, cell: int, line: int | None, exc: SyntaxError) -> str:
    where = f"cell {cell}, line {line}" if line else f"cell {cell}"
    text = f"{name}: {where} (tagged '{SOLUTION_TAG}'): {type(exc).__name__}: {exc.msg}"
    if exc.text and exc.text.strip():
        text += f"\n    {exc.text.rstrip()}"
        if exc.offset:
            text += "\n    " + " " * max(0, exc.offset - 1) + "^"
    return text
