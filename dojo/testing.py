"""Helpers that hidden suites share: banned-shortcut checks by AST, readable comparisons, and the
two pieces every timing test relies on: the *inconclusive* outcome and the machine-wide timing lock.

`inconclusive(message)` ends a test the machine was too noisy to decide: skipped to plain pytest,
"inconclusive" to the grading plugin, counted neither for nor against. The plugin holds `timing_lock()`
around each `@pytest.mark.machine` test, so no two timing tests on one machine run at once. How a test
measures is dojo.machine; fake clocks are dojo.fakeclock.
"""

from __future__ import annotations

import ast
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

from dojo import source, timing_lock_path

# the one machine-wide lock file; never inside a sandbox (dojo.grading.machine_lock holds it for sandboxed tests)
TIMING_LOCK_PATH = timing_lock_path()
LOCK_WAIT_S = 45.0  # longest a timing test waits for another one before it gives up as inconclusive


def banned_uses(path: Path, names: set[str]) -> list[str]:
    """Every import or attribute/name use in the file at `path` that mentions one of `names`.

    Matches module imports (`import tiktoken`, `from tokenizers import X`), imported names,
    attribute access (`F.scaled_dot_product_attention`) and strings that name one, built from constants
    or not (`getattr(F, "scaled_dot_product" + "_attention")`, `import_module("gguf.quants")`). Returns readable "line N: ..." entries. The file
    is decoded as Python decodes it (its coding cookie, dojo.source); bytes Python would refuse are an entry.
    Raises SyntaxError when the decoded text does not parse.
    """
    try:
        text, _ = source.read_python(path)
    except source.Undecodable as exc:
        return [f"line {exc.line}: cannot be read as Python source ({exc})"]
    tree = ast.parse(text, filename=str(path))
    found = []
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}  # docstrings: text, not names
    for node in ast.walk(tree):
        hits: list[str] = []
        if isinstance(node, ast.Import):
            hits = [a.name for a in node.names if a.name.split(".")[0] in names or a.name in names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod.split(".")[0] in names or mod in names:
                hits = [mod]
            hits += [a.name for a in node.names if a.name in names]
        elif isinstance(node, ast.Attribute) and node.attr in names:
            hits = [node.attr]
        elif isinstance(node, ast.Name) and node.id in names:
            hits = [node.id]
        else:  # a string naming one, however it is built: importlib.import_module("gg" + "uf.quants")
            text = source.fold(node) if id(node) not in prose else None
            if (
                text is not None
                and re.fullmatch(r"[\w.]+", text)
                and (text in names or set(text.split(".")) & names)
            ):
                hits = [text]
        found += [f"line {node.lineno}: {h}" for h in hits]
    return sorted(set(found))


_NAMED = re.compile(r"[A-Za-z_][\w.]*")  # a stub's message naming its function: "BPETokenizer.load"


def unwritten(exc: BaseException) -> bool:
    """Whether `exc` is a stub's NotImplementedError, work not written yet: its message is empty or names
    the function (bpe's stubs), not a library's own words ("addmm_impl_cpu_" not implemented for 'Half')."""
    if not isinstance(exc, NotImplementedError):
        return False
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a str() that raises says nothing either way
        return False
    return not text or bool(_NAMED.fullmatch(text))


def raised(exc: BaseException) -> str:
    """How a failure names an exception the test did not want: a stub's NotImplementedError is work "not
    written yet (NotImplementedError at bpe.py:78, in BPETokenizer.load)", naming where it was raised
    when this process saw that (judge mode's worker says only the function); anything else "raised
    Type: message"."""
    if unwritten(exc):
        place, function = _raised_at(exc)
        where = f" at {place}, in {function}" if place else f" in {function}" if function else ""
        return f"not written yet (NotImplementedError{where})"
    return f"raised {type(exc).__name__}: {exc}" if str(exc) else f"raised {type(exc).__name__}"


def _raised_at(exc: BaseException) -> tuple[str, str]:
    """("file.py:LINE", "Class.method") of the frame that raised `exc`; ("", function) for an error from
    judge mode's worker, whose `where` is "LINE, in function" in a file this side does not name."""
    if getattr(exc, "remote_type", None):
        return "", str(getattr(exc, "where", "")).rpartition(", in ")[2] or str(exc)
    tb = exc.__traceback__
    if tb is None:
        return "", str(exc)
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{Path(code.co_filename).name}:{tb.tb_lineno}", code.co_qualname


def expect_raises(exc_type: type[BaseException], fn, what: str) -> BaseException:
    """Call fn(); the `exc_type` it raises, or a test failure saying what it did instead
    ("not written yet (NotImplementedError at ...), want ValueError" for a stub)."""
    try:
        fn()
    except exc_type as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - the wrong exception is the finding
        pytest.fail(f"{what}: {raised(exc)}, want {exc_type.__name__}", pytrace=False)
    pytest.fail(f"{what}: raised nothing, want {exc_type.__name__}", pytrace=False)


def expect_value_error(fn, what: str) -> ValueError:
    """Call fn(); the ValueError it raises, or a test failure saying what it did instead."""
    return expect_raises(ValueError, fn, what)


class Inconclusive(pytest.skip.Exception):
    """A timing test could not decide on this machine, now: reported as skipped by plain pytest and
    as "inconclusive" by the grading plugin. Never a verdict on the code under test."""

    __test__ = False


def inconclusive(message: str) -> NoReturn:
    """End the running test as inconclusive, saying what was measured and why it cannot decide."""
    raise Inconclusive(f"inconclusive: {message}", _use_item_location=True)


@contextmanager
def timing_lock(path: Path | None = None, wait_s: float | None = None) -> Iterator[None]:
    """Hold the machine-wide timing lock (fcntl.flock on TIMING_LOCK_PATH) for the block.

    Waits up to `wait_s` (default LOCK_WAIT_S) seconds for another process's timing test to finish, then raises
    Inconclusive (the machine stayed busy with timing). Raises pytest.UsageError when the lock file
    cannot be opened (open_lock's LockFileError). The lock dies with its process, so a killed run
    never leaves it held. Practice runs take it here, in the test process; a grading's child asks
    its parent instead (dojo.grading.machine_lock).
    """
    path = TIMING_LOCK_PATH if path is None else Path(path)
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    try:
        fd = open_lock(path)
    except LockFileError as exc:
        raise pytest.UsageError(str(exc)) from exc
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    inconclusive(f"another timing test held the machine ({path}) for over {wait_s:g} s")
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class LockFileError(ValueError):
    """The timing lock's path is not a plain file this process can open: a symlink, a folder, a device,
    a missing folder or a file it may not read."""


def open_lock(path: Path) -> int:
    """A read-only descriptor (flock needs no more) on the lock file at `path`, created 0644 if missing.

    Opened with O_NOFOLLOW and O_CLOEXEC (and O_NONBLOCK: a FIFO planted there does not hang us), never
    chmod-ed or written: a symlink planted at the path
    (in a shared /tmp) is refused, not followed. Raises LockFileError, naming the path and
    DOJO_TIMING_LOCK, for a symlink, anything but a regular file, or a file that cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        why = "it is a symlink, which is never followed" if exc.errno == errno.ELOOP else exc.strerror
        raise LockFileError(
            f"cannot open the timing lock {path} ({why}): set DOJO_TIMING_LOCK to a plain file"
        ) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LockFileError(
            f"the timing lock {path} is not a regular file: set DOJO_TIMING_LOCK to a plain file"
        )
    return fd
