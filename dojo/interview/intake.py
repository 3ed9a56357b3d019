"""A take-home's submissions made ready to grade: read once, checked, copied privately, or refused with a reason.

`prepare(path, slugs, private)` reads one submission (a folder, or a notebook given on its own) through
dojo.grading.inputs (no links followed, size limits, decoding), extracts each notebook's solution cells in a
bounded child (dojo.grading.bounded: a notebook is the candidate's JSON, parsed nowhere else), and writes
exactly the bytes read (for a notebook: its solution cells, cell numbers kept) into `private`, a folder
only this user can enter. What it returns says, per kata, the copy to grade and the source that was read,
or that kata file's error; and the submission's own errors (a folder that cannot be read, a notebook that
names no kata, near-miss file names). Nothing here raises for what a submission holds.

Left out: grading the copies and the report around them (dojo.interview.takehome).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from dojo.grading import bounded, inputs


@dataclass(frozen=True)
class Ready:
    """One kata file, copied privately and ready to grade."""

    slug: str
    original: Path  # where the candidate's file is (as given; a link's own name)
    copy: Path  # the private copy of the bytes read: grade this
    source: str  # the code read (a notebook's solution cells), for dojo.grading.similarity


@dataclass
class Prepared:
    path: Path  # the submission as given, made absolute
    ready: list[Ready] = field(default_factory=list)
    refused: dict[str, tuple[Path, str]] = field(default_factory=dict)  # slug -> (its file, why it cannot be graded)
    errors: list[str] = field(default_factory=list)  # the submission's own problems


def prepare(path: Path, slugs: list[str], private: Path) -> Prepared:
    """Read the submission at `path` (a folder of <slug>.py / <slug>.ipynb, or one .ipynb) for the katas
    `slugs` and copy what can be graded into the private folder `private` (created 0700)."""
    if path.suffix == ".ipynb" and not path.is_dir():
        return _lone_notebook(path, slugs, private)
    sub = inputs.read_submission(path, slugs)
    out = Prepared(sub.path, errors=[sub.errors.pop("")] if "" in sub.errors else [])
    out.refused.update({slug: (sub.path / sub.names[slug], why) for slug, why in sub.errors.items()})
    for slug, file in sub.files.items():
        _ready(out, slug, file, sub.path / file.name, private)
    return out


def _lone_notebook(path: Path, slugs: list[str], private: Path) -> Prepared:
    """A notebook given as PATH: its kata is the one its metadata names, else its file name's."""
    out = Prepared(Path(os.path.abspath(path)))
    by_name = path.stem if path.stem in slugs else None
    try:
        file = inputs.read_notebook(path)
        cells = _solution_cells(file)
    except inputs.InputError as exc:
        if by_name:
            out.refused[by_name] = (out.path, str(exc))
        else:
            out.errors.append(str(exc))
        return out
    named = cells["kata"]
    if named and named not in slugs:
        out.errors.append(f"{path.name} is for kata {named!r} (its metadata says), which has no hidden suite")
    elif named or by_name:
        _ready(out, named or by_name, file, out.path, private, cells)
    else:
        out.errors.append(f"cannot tell which kata {path.name} is for: name it <kata>.ipynb (one of {', '.join(slugs)})")
    return out


def _ready(out: Prepared, slug: str, file: inputs.KataFile, original: Path, private: Path,
           cells: dict | None = None) -> None:
    """Copy `file` privately for grading and add it to `out`, or add why it cannot be graded."""
    try:
        if not file.notebook:
            source, data = inputs.python_source(file.name, file.data), file.data
        else:
            cells = cells or _solution_cells(file)
            source, data = cells["source"], json.dumps(cells["notebook"]).encode()
        copy = inputs.private_copy(private, file.name, data)
    except inputs.InputError as exc:
        out.refused[slug] = (original, str(exc))
        return
    except OSError as exc:
        out.refused[slug] = (original, f"{file.name} could not be copied for grading: {exc}")
        return
    out.ready.append(Ready(slug, original, copy, source))


def _solution_cells(file: inputs.KataFile) -> dict:
    """dojo.notebook.extract.solution_only on the notebook's text, in a bounded child. Raises InputError."""
    try:
        text = file.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise inputs.InputError(f"{file.name} is not a notebook: its bytes are not UTF-8 JSON ({exc.reason} at byte "
                                f"{exc.start})") from None
    try:
        cells = bounded.call("dojo.notebook.extract:solution_only", {"text": text, "name": file.name})
    except bounded.BoundedError as exc:
        if exc.kind == "NotebookError":
            raise inputs.InputError(str(exc).removeprefix("NotebookError: ")) from None
        raise inputs.InputError(f"{file.name} could not be read as a notebook: {exc}") from None
    if len(cells["source"].encode()) > inputs.MAX_SOURCE_BYTES:
        raise inputs.InputError(f"{file.name}'s solution cells hold over {inputs.MAX_SOURCE_BYTES / 2**20:g} MiB "
                                f"of code: refused")
    return cells
