"""Making kata notebooks: the .ipynb that `dojo notebook <slug>` writes and `make notebooks` renders.

A kata notebook is five cells: the prompt (`prompt`: the README in the notebook's terms), how it is
graded, the stub in a code cell tagged `solution`, a scratch cell, and a grading cell calling
`grade_here()`. Its metadata is what JupyterLab would write for the "decode-dojo" kernel, so a fresh
notebook opens clean. A notebook holding work is replaced only on request, after a backup.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from dojo import catalog
from dojo.catalog import Kata
from dojo.notebook import extract as nbextract
from dojo.notebook.extract import SOLUTION_TAG, NotebookError
from dojo.practice import workspace

KERNELSPEC = {"name": "decode-dojo", "display_name": "decode-dojo (.venv)", "language": "python"}
GRADE_TAG = "grade"


def notebook_file(slug: str) -> Path:
    """workspace/<slug>.ipynb"""
    return workspace.notebook_file(slug)


def language_info() -> dict:
    """The `language_info` the decode-dojo kernel reports (it runs this python): ipykernel's own block, whole.
    JupyterLab writes it into the notebook when the kernel starts, and marks the notebook modified if it
    changed anything."""
    from ipykernel.ipkernel import IPythonKernel

    return json.loads(json.dumps(IPythonKernel.language_info))  # a deep copy


def prompt(kata: Kata) -> str:
    """The kata's README as a notebook's prompt: the file to fill in is the solution cell below, and the
    `dojo start` that makes the file is left out."""
    text = kata.readme().strip()
    text = re.sub(rf" ?\(`dojo start {kata.slug}`[^)]*\)", "", text)  # "(`dojo start bpe` copies it ...)"
    text = text.replace(f"(`{kata.slug}.py`)", "(the solution cell)")  # "## The API (`int4.py`)"
    text = re.sub(rf"(^|[.!?] +)`{kata.slug}\.py`", r"\1The solution cell", text, flags=re.MULTILINE)
    return text.replace(f"`{kata.slug}.py`", f"the solution cell (tagged `{SOLUTION_TAG}`, below)")


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
            "run the last cell: it grades the notebook *as saved* (its report says when that was) with the "
            f"hidden suite of `dojo check {slug}`, and records the attempt. From a terminal: "
            f"`dojo check {slug} --notebook`. Failures name a cell, counted from 1 at the top with markdown "
            "cells included, and a line in it: **View > Show Line Numbers** shows them."
        )
        call = f'grade_here("{slug}")'
    locked = {"editable": False, "deletable": False} if reference else {}
    grade_cell = (
        "# Grades the notebook as SAVED: save first (Ctrl-S / Cmd-S).\n"
        '# Needs the kernel "decode-dojo (.venv)", which `make setup` installs.\n'
        f"from dojo.notebook import grade_here\n\n{call}"
    )
    return {
        "cells": [
            _cell("markdown", "prompt", prompt(kata), locked),
            _cell("markdown", "how", how, locked),
            _cell("code", "solution", code.rstrip("\n"), {"tags": [SOLUTION_TAG], **locked}),
            _cell("code", "scratch", "# Scratch: try your code here. Not graded.\n", locked),
            _cell("code", "grade", grade_cell, {"tags": [GRADE_TAG], **locked}),
        ],
        "metadata": {
            "kernelspec": dict(KERNELSPEC),
            "language_info": language_info(),
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


def _write(nb, path: Path, *, mode: int = 0o644) -> None:
    """Write `nb` (a notebook's JSON document) atomically; `mode`: file permissions to set (0644 as the
    kata files: mkstemp makes 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(nb, f, indent=1, ensure_ascii=False)
            f.write("\n")
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
