"""The failure text of a graded test: what a learner reads under a FAIL line, in the kata's terms.

`failure_message` keeps an assertion's own message (the suite wrote it for the learner), and for
any other exception names it and where in the learner's file it was raised ("ValueError: ... (at
bpe.py:12, in encode)"), with hypothesis's falsifying example; the runner's own failures (sys.exit,
the time limit, memory, output) get a sentence saying what happened. Left out: pytest's traceback
(never shown) and choosing the outcome (dojo.grading.plugin).
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest


class TestTimeout(BaseException):
    """Raised inside a test that ran past --dojo-test-timeout (a BaseException, so `except Exception` in a
    learner's loop cannot swallow it)."""

    __test__ = False  # not a test class, whatever its name


def failure_message(excinfo: pytest.ExceptionInfo | None, longrepr, target: str | None = None) -> str:
    """The readable part of a failure: the assertion's own message, or the exception and where in the
    learner's file (`target`) it was raised; plus any notes (hypothesis's falsifying example)."""
    if excinfo is None:
        return str(longrepr or "")[-2000:]
    exc = excinfo.value
    notes = "".join(f"\n{note}" for note in _notes(exc))
    if isinstance(exc, AssertionError):
        text = str(exc).split("\nassert ")[0].strip()
        return (text or "assertion failed") + notes
    if isinstance(exc, pytest.fail.Exception):
        return str(exc.msg if hasattr(exc, "msg") else exc)
    if isinstance(exc, pytest.skip.Exception):
        return str(exc)
    if getattr(exc, "remote_type", None):  # raised in judge mode's worker: where is its own report
        where = f" (at {Path(target).name if target else 'your file'}:{exc.where})" if exc.where else ""
        return _describe(exc, where) + notes
    return _describe(exc, _where(excinfo, target)) + notes


def _notes(exc: BaseException) -> list[str]:
    """Notes attached to the exception (hypothesis's failing example), without the kata module's repr
    and hypothesis's commentary lines."""
    out = []
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, str):
            lines = [line for line in note.splitlines() if "kata=<module" not in line and "The test always failed" not in line]
            out.append("\n".join(lines))
    return out


def _where(excinfo: pytest.ExceptionInfo, target: str | None) -> str:
    """" (at file.py:LINE, in func)" for the innermost frame in the learner's file (or, failing that, in
    any file that is not the suite's, the plugin's or a library's)."""
    entries = list(reversed(excinfo.traceback))
    mine = [e for e in entries if target and str(e.path) == target]
    others = [e for e in entries if not any(part in str(e.path) for part in ("/tests/", "site-packages", "/dojo/"))]
    for entry in mine or others:
        return f" (at {Path(str(entry.path)).name}:{entry.lineno + 1}, in {entry.name})"
    return ""


def _describe(exc: BaseException, where: str) -> str:
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code}){where}: return a value or raise instead"
    if isinstance(exc, TestTimeout):
        return f"{exc}{where}"
    if isinstance(exc, MemoryError):
        return f"MemoryError: ran out of memory (the grader limits memory){where}"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return f"wrote or printed more output than the grader allows{where}"
    if isinstance(exc, NotImplementedError) and not str(exc):
        return f"NotImplementedError: not written yet{where}"
    if type(exc).__name__ == "BoundaryError":  # judge mode: the worker died, hung or broke the protocol
        from dojo.grading import judge

        return f"{judge.describe_failure(exc) or exc}{where}"
    return f"{type(exc).__name__}: {exc}{where}"
