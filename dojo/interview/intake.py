"""A take-home's submissions made ready to grade: read once, checked, copied privately, or refused with a reason.

`prepare(path, slugs, private)` reads one submission (a folder, or a notebook given on its own) within size
limits, following no link out of the folder, a .py decoded as Python decodes it; extracts each notebook's
solution cells in a bounded child; and writes into `private`, a folder only this user can enter, the bytes
read of a .py, or the notebook reduced to its solution cells. It returns, per kata, the copy to grade and
the source read, or why the file is refused. Nothing here raises for what a submission holds; grading the
copies is dojo.interview.takehome's. The rules a file must pass: docs/grading.md.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tokenize
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from dojo.grading.confine import bounded

MAX_SOURCE_BYTES = 1 << 20  # a kata's .py, and the code extracted from a notebook: 1 MiB
MAX_NOTEBOOK_BYTES = 8 << 20  # a whole .ipynb (its outputs included): 8 MiB
LISTED = 10_000  # folder entries looked at for near-miss names
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: opening a fifo must not hang
_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a fifo",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFLNK: "a symbolic link",
}


class InputError(ValueError):
    """A submission's file (or folder) cannot be graded as it is; the message names it and says why."""


@dataclass(frozen=True)
class KataFile:
    name: str  # the file's name in the submission: bpe.py, bpe.ipynb, answer.ipynb
    data: bytes  # exactly the bytes read, once

    @property
    def notebook(self) -> bool:
        return self.name.endswith(".ipynb")


@dataclass
class Submission:
    path: Path  # the folder (or notebook) as given, made absolute; never resolved through links
    files: dict[str, KataFile] = field(default_factory=dict)  # slug -> its file
    errors: dict[str, str] = field(default_factory=dict)  # slug, or "" for the folder -> message
    names: dict[str, str] = field(default_factory=dict)  # slug -> its kata file's name, read or refused


def read_submission(path: Path, slugs: list[str]) -> Submission:
    """The kata files of the folder at `path`: for each slug, `<slug>.py`, else `<slug>.ipynb`, read and
    checked (see the module docstring). Problems go into `errors` under the slug (under "" for the folder
    itself: missing, a link, unreadable, or files with near-miss names); this raises nothing."""
    sub = Submission(Path(os.path.abspath(path)))
    try:
        folder = os.open(sub.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        sub.errors[""] = _folder_problem(sub.path, exc)
        return sub
    try:
        for slug in slugs:
            name = next((n for n in (f"{slug}.py", f"{slug}.ipynb") if _exists(folder, n)), None)
            if name is None:
                continue
            sub.names[slug] = name
            try:
                sub.files[slug] = KataFile(name, _read(folder, name))
                if not name.endswith(".ipynb"):
                    python_source(name, sub.files[slug].data)
            except InputError as exc:
                sub.files.pop(slug, None)
                sub.errors[slug] = str(exc)
        near = _near_misses(folder, slugs)
        if near:
            sub.errors[""] = near
    finally:
        os.close(folder)
    return sub


def read_notebook(path: Path) -> KataFile:
    """The notebook at `path` (given on its own, not in a folder), read as read_submission reads files.
    Raises InputError (a link, not a file, unreadable, too large)."""
    path = Path(os.path.abspath(path))
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(_folder_problem(path.parent, exc)) from None
    try:
        return KataFile(path.name, _read(folder, path.name))
    finally:
        os.close(folder)


def python_source(name: str, data: bytes) -> str:
    """The text of a .py file's bytes, decoded as Python does (utf-8, or its PEP 263 coding cookie).
    Raises InputError for NUL bytes, a bad cookie, or bytes that do not decode."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(f"{name} holds a NUL byte (at byte {nul}): it is not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # a bad cookie, or first lines that are not utf-8 (then say which byte)
        _decode(name, data, "utf-8")
        raise InputError(f"{name}: {exc.msg}") from None
    return _decode(name, data, encoding)


def _decode(name: str, data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"{name} is not valid {encoding} text: byte 0x{data[exc.start]:02x} at line {line} "
            f"(save it as UTF-8)"
        ) from None


def private_copy(folder: Path, name: str, data: bytes) -> Path:
    """Write `data` as `folder/name`, private to this user: the folder made 0700 (created if missing), the file
    created 0600, never through a link or over an existing file. Returns the file's path. Raises OSError."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return path


def _exists(folder: int, name: str) -> bool:
    """Whether the open folder has an entry `name` (of any kind: a link, dangling or not, is one)."""
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # there, but not even its type can be read: _read says why
    return True


def _read(folder: int, name: str) -> bytes:
    """The bytes of `name` in the open folder, checked: a plain file (or a link to one beside it), within its limit."""
    shown = name
    try:
        st = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError as exc:
        raise InputError(f"{name} cannot be read: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(name, dir_fd=folder)
        beside = os.path.normpath(target)
        refusal = (
            f"{name} is a symbolic link (to {target!r}): a submission's files are read as plain files, never "
            f"through links (a link to another file in the same folder is the one exception)"
        )
        if "/" in beside or beside in (".", ".."):
            raise InputError(refusal)
        try:
            st = os.stat(beside, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            raise InputError(f"{name} is a symbolic link to {target!r}, which does not exist") from None
        if stat.S_ISLNK(st.st_mode):
            raise InputError(
                f"{name} is a symbolic link to {target!r}, itself a link (or a loop): not followed"
            )
        name, shown = beside, f"{name} (a link to {beside})"
    limit = MAX_NOTEBOOK_BYTES if name.endswith(".ipynb") else MAX_SOURCE_BYTES
    try:
        fd = os.open(name, _OPEN, dir_fd=folder)
    except OSError as exc:
        raise InputError(f"{shown} cannot be read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(
                f"{shown} is {_KINDS.get(stat.S_IFMT(st.st_mode), 'not a regular file')}, not a file"
            )
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise InputError(f"{shown} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InputError(
            f"{shown} is {max(st.st_size, len(data)) / 2**20:.1f} MiB: kata files over "
            f"{limit / 2**20:g} MiB are refused, unread"
        )
    return data


def _folder_problem(path: Path, exc: OSError) -> str:
    if path.is_symlink():
        return f"{path} is a symbolic link: give the folder itself (links are never followed)"
    if path.exists() and not path.is_dir():
        return (
            f"{path} is not a folder: each PATH is a folder of kata files (<slug>.py) or a notebook (.ipynb)"
        )
    return f"{path} cannot be read: {exc.strerror}"


def _near_misses(folder: int, slugs: list[str]) -> str:
    """A line naming entries that are nearly kata files (`Toy.py`, `toy.py `) and so are not graded."""
    wanted = {f"{s}{ext}".casefold(): f"{s}{ext}" for s in slugs for ext in (".py", ".ipynb")}
    with os.scandir(folder) as entries:
        names = [e.name for e in islice(entries, LISTED)]
    near = [
        f"{n!r} (not {wanted[n.strip().casefold()]!r})"
        for n in sorted(names)
        if n not in wanted.values() and n.strip().casefold() in wanted
    ]
    return f"not graded, since kata files are found by exact name: {', '.join(near)}" if near else ""


# ---- the submission made ready to grade ---------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """One kata file, copied privately and ready to grade."""

    slug: str
    original: Path  # where the candidate's file is (as given; a link's own name)
    copy: Path  # the private copy of the bytes read: grade this
    source: str  # the code read (a notebook's solution cells), for dojo.grading.scan.similarity


@dataclass
class Prepared:
    path: Path  # the submission as given, made absolute
    ready: list[Ready] = field(default_factory=list)
    refused: dict[str, tuple[Path, str]] = field(
        default_factory=dict
    )  # slug -> (its file, why it cannot be graded)
    errors: list[str] = field(default_factory=list)  # the submission's own problems


def prepare(path: Path, slugs: list[str], private: Path) -> Prepared:
    """Read the submission at `path` (a folder of <slug>.py / <slug>.ipynb, or one .ipynb) for the katas
    `slugs` and copy what can be graded into the private folder `private` (created 0700)."""
    if path.suffix == ".ipynb" and not path.is_dir():
        return _lone_notebook(path, slugs, private)
    sub = read_submission(path, slugs)
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
        file = read_notebook(path)
        cells = _solution_cells(file)
    except InputError as exc:
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
        out.errors.append(
            f"cannot tell which kata {path.name} is for: name it <kata>.ipynb (one of {', '.join(slugs)})"
        )
    return out


def _ready(
    out: Prepared, slug: str, file: KataFile, original: Path, private: Path, cells: dict | None = None
) -> None:
    """Copy `file` privately for grading and add it to `out`, or add why it cannot be graded."""
    try:
        if not file.notebook:
            source, data = python_source(file.name, file.data), file.data
        else:
            cells = cells or _solution_cells(file)
            source, data = cells["source"], json.dumps(cells["notebook"]).encode()
        copy = private_copy(private, file.name, data)
    except InputError as exc:
        out.refused[slug] = (original, str(exc))
        return
    except OSError as exc:
        out.refused[slug] = (original, f"{file.name} could not be copied for grading: {exc}")
        return
    out.ready.append(Ready(slug, original, copy, source))


def _solution_cells(file: KataFile) -> dict:
    """dojo.notebook.extract.solution_only on the notebook's text, in a bounded child. Raises InputError."""
    try:
        text = file.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{file.name} is not a notebook: its bytes are not UTF-8 JSON ({exc.reason} at byte {exc.start})"
        ) from None
    try:
        cells = bounded.call("dojo.notebook.extract:solution_only", {"text": text, "name": file.name})
    except bounded.BoundedError as exc:
        if exc.kind == "NotebookError":
            raise InputError(str(exc).removeprefix("NotebookError: ")) from None
        raise InputError(f"{file.name} could not be read as a notebook: {exc}") from None
    if len(cells["source"].encode()) > MAX_SOURCE_BYTES:
        raise InputError(
            f"{file.name}'s solution cells hold over {MAX_SOURCE_BYTES / 2**20:g} MiB of code: refused"
        )
    return cells
