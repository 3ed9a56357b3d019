"""The learner's workspace: flat copies of the stubs, backups, results.

workspace/<slug>.py is the file a learner edits ($DOJO_WORKSPACE moves the whole folder), or
workspace/<slug>.ipynb in notebook mode (written by dojo.notebook; `form` says which one a kata is in);
workspace/.dojo/ holds the progress database and backups of overwritten work;
workspace/results/<slug>.json holds the last grading of each kata. Work is never overwritten
without a backup.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from dojo.catalog import Kata
from dojo.targets import workspace_dir

__all__ = [
    "StartResult",
    "WorkExists",
    "backups_dir",
    "form",
    "kata_file",
    "notebook_file",
    "reset",
    "results_file",
    "start",
    "workspace_dir",
]


class WorkExists(FileExistsError):
    """`start` found work in the workspace and was not told to overwrite it."""


@dataclass(frozen=True)
class StartResult:
    path: Path
    created: bool  # False: the existing copy was kept
    backup: Path | None = None  # where overwritten work went


def kata_file(slug: str) -> Path:
    return workspace_dir() / f"{slug}.py"


def notebook_file(slug: str) -> Path:
    return workspace_dir() / f"{slug}.ipynb"


def form(slug: str) -> str | None:
    """The form the learner works on `slug` in: "py" (workspace/<slug>.py) or "ipynb" (workspace/<slug>.ipynb);
    the one saved last when both are there; None when neither is."""
    stamps = {}
    for kind, path in (("py", kata_file(slug)), ("ipynb", notebook_file(slug))):
        try:
            stamps[kind] = path.stat().st_mtime
        except FileNotFoundError:
            pass
    return max(stamps, key=stamps.get) if stamps else None


def results_file(slug: str) -> Path:
    return workspace_dir() / "results" / f"{slug}.json"


def backups_dir() -> Path:
    return workspace_dir() / ".dojo" / "backups"


def start(kata: Kata, *, force: bool = False) -> StartResult:
    """Copy the stub of `kata` into the workspace.

    An existing copy identical to the stub, or any copy without `force`, is kept (created=False);
    with `force` it is backed up first, then replaced. Raises FileNotFoundError when the kata has no stub.
    """
    if not kata.stub.is_file():
        raise FileNotFoundError(f"kata {kata.slug!r} has no stub yet at {kata.stub}")
    path = kata_file(kata.slug)
    backup = None
    if path.exists():
        if not force or path.read_bytes() == kata.stub.read_bytes():
            return StartResult(path, created=False)
        backup = _backup(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kata.stub, path)
    return StartResult(path, created=True, backup=backup)


def has_work(kata: Kata) -> bool:
    """Whether the workspace copy exists and differs from the pristine stub."""
    path = kata_file(kata.slug)
    return path.exists() and (not kata.stub.is_file() or path.read_bytes() != kata.stub.read_bytes())


def reset(kata: Kata) -> StartResult:
    """Restore the pristine stub, backing up the current copy (if any)."""
    return start(kata, force=True) if kata_file(kata.slug).exists() else start(kata)


def _backup(path: Path) -> Path:
    folder = backups_dir()
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dst = folder / f"{path.stem}-{stamp}.py"
    n = 1
    while dst.exists():
        dst = folder / f"{path.stem}-{stamp}-{n}.py"
        n += 1
    shutil.copy2(path, dst)
    return dst
