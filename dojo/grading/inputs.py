"""A take-home's files, read once and checked, never followed: the bytes that get graded.

`read_submission(path, slugs)` opens a submission folder without following links and reads each kata
file in it (`<slug>.py`, else `<slug>.ipynb`, found by exact name) into memory; `read_notebook(path)` does the
same for a notebook given on its own. A file that cannot be graded as it is becomes that file's error, a
message naming it and the problem, and never stops the other files:
- a symbolic link, unless it names another plain file in the same folder (`bpe.py -> mine.py`); a link to
  anywhere else (/etc/shadow, another candidate's folder), to a link, a loop or a dangling link is refused;
- a folder, fifo, socket or device with a kata file's name; a file that cannot be opened;
- a file over MAX_SOURCE_BYTES (.py) or MAX_NOTEBOOK_BYTES (.ipynb), refused before anything parses it;
- for .py: NUL bytes, a bad coding cookie, or bytes that do not decode per tokenize.detect_encoding
  (utf-8 unless a PEP 263 cookie says otherwise);
- a name that is nearly a kata file's (`Toy.py`, `toy.py ` ...) is reported, since it is not graded.
`private_copy` writes bytes read here into a private folder (0700 folders, 0600 files) to grade from.

Left out: what a notebook holds (parsing it is for a bounded child: dojo.interview.takehome), whether the
source parses (the grading says), and any check of what the code does (dojo.grading.integrity).
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

MAX_SOURCE_BYTES = 1 << 20  # a kata's .py, and the code extracted from a notebook: 1 MiB
MAX_NOTEBOOK_BYTES = 8 << 20  # a whole .ipynb (its outputs included): 8 MiB
LISTED = 10_000  # folder entries looked at for near-miss names
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: opening a fifo must not hang
_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a fifo", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a device", stat.S_IFBLK: "a device", stat.S_IFLNK: "a symbolic link"}


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
        raise InputError(f"{name} is not valid {encoding} text: byte 0x{data[exc.start]:02x} at line {line} "
                         f"(save it as UTF-8)") from None


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
        refusal = (f"{name} is a symbolic link (to {target!r}): a submission's files are read as plain files, never "
                   f"through links (a link to another file in the same folder is the one exception)")
        if "/" in beside or beside in (".", ".."):
            raise InputError(refusal)
        try:
            st = os.stat(beside, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            raise InputError(f"{name} is a symbolic link to {target!r}, which does not exist") from None
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"{name} is a symbolic link to {target!r}, itself a link (or a loop): not followed")
        name, shown = beside, f"{name} (a link to {beside})"
    limit = MAX_NOTEBOOK_BYTES if name.endswith(".ipynb") else MAX_SOURCE_BYTES
    try:
        fd = os.open(name, _OPEN, dir_fd=folder)
    except OSError as exc:
        raise InputError(f"{shown} cannot be read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{shown} is {_KINDS.get(stat.S_IFMT(st.st_mode), 'not a regular file')}, not a file")
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
        raise InputError(f"{shown} is {max(st.st_size, len(data)) / 2**20:.1f} MiB: kata files over "
                         f"{limit / 2**20:g} MiB are refused, unread")
    return data


def _folder_problem(path: Path, exc: OSError) -> str:
    if path.is_symlink():
        return f"{path} is a symbolic link: give the folder itself (links are never followed)"
    if path.exists() and not path.is_dir():
        return f"{path} is not a folder"
    return f"{path} cannot be read: {exc.strerror}"


def _near_misses(folder: int, slugs: list[str]) -> str:
    """A line naming entries that are nearly kata files (`Toy.py`, `toy.py `) and so are not graded."""
    wanted = {f"{s}{ext}".casefold(): f"{s}{ext}" for s in slugs for ext in (".py", ".ipynb")}
    with os.scandir(folder) as entries:
        names = [e.name for e in islice(entries, LISTED)]
    near = [f"{n!r} (not {wanted[n.strip().casefold()]!r})" for n in sorted(names)
            if n not in wanted.values() and n.strip().casefold() in wanted]
    return f"not graded, since kata files are found by exact name: {', '.join(near)}" if near else ""
