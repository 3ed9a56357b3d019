"""The failure text of a graded test: what a learner reads under a FAIL line, in the kata's terms.

`failure_message` keeps an assertion's own message; for any other exception it names it and where
in the learner's file it was raised ("ValueError: ... (at bpe.py:12, in encode)"), with hypothesis's
falsifying example as arguments ("failing input: text='ab', threshold=2"), its commentary left out.
`case_label` names a parametrised test's case in words ("seed=2", "decode, batch=3"). It never shows
pytest's traceback; choosing the outcome is dojo.grading.suite.plugin's.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from dojo.testing import unwritten


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
    group = getattr(exc, "exceptions", None)  # an exception group: hypothesis found several distinct failures
    if isinstance(group, tuple) and group and isinstance(group[0], BaseException) and group[0].__traceback__:
        first = failure_message(pytest.ExceptionInfo.from_exception(group[0]), longrepr, target)
        return f"{first}\n(and {len(group) - 1} more distinct failure(s) of this property)"
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
    """Notes attached to the exception, in the kata's terms: hypothesis's failing example as its arguments
    (and its draws), without its commentary; other notes as they are, less any line naming a file."""
    out = []
    for note in getattr(exc, "__notes__", ()):
        if not isinstance(note, str):
            continue
        if note.startswith(_EXAMPLE_HEADS):
            out.append(falsifying_example(note))
        elif note.startswith("Draw "):  # st.data(): "Draw 1: 100"
            out.append("then drew " + note.split(": ", 1)[-1])
        elif not note.startswith(_HYPOTHESIS_CHATTER) and not note.startswith(" "):
            out.append("\n".join(line for line in note.splitlines() if not _FILE_LINE.search(line)))
    return [note for note in out if note]


_EXAMPLE_HEADS = ("Failing test case:", "Falsifying example:", "Falsifying explicit example:")
_HYPOTHESIS_CHATTER = (
    "Explanation:",
    "You can reproduce",
    "Unreliable test",
    "Highest target",
    "Trying example",
    "Hypothesis",
    "@reproduce_failure",
    "Retried",
    "Tests with",
    "The test always failed",
)
_FILE_LINE = re.compile(r"[\w.-]*/[\w./-]+\.py\b(:\d+)?")  # /tmp/dojo-grade-bpe-x/tests/katas/test_bpe.py:86
_ANY_VALUE = "  # or any other generated value"


def falsifying_example(note: str) -> str:
    """hypothesis's "Failing test case: test_x(\\n    text='ab',\\n    kata=<module ...>,\\n)" as the
    arguments a learner can call with: "failing input: text='ab'". Objects shown as <...> (the kata
    module, fixtures) and st.data() are left out; when hypothesis says any value fails, "for any input"."""
    args: list[str] = []
    for line in note.splitlines()[1:]:
        if line.strip().startswith("#"):  # hypothesis's commentary ("The test always failed when ...")
            continue
        if line.startswith("    ") and not line.startswith("     "):
            args.append(line[4:])
        elif line.startswith("     ") and args:  # a long value continues on more lines
            args[-1] += " " + line.strip()
    kept, any_value = [], True
    for arg in args:
        any_value &= arg.endswith(_ANY_VALUE)
        arg = arg.removesuffix(_ANY_VALUE).rstrip(",")
        value = arg.partition("=")[2]
        if value.startswith("<") or value == "data(...)":
            continue
        kept.append(arg)
    if any_value:
        return "fails for any input"
    return "failing input: " + ", ".join(kept) if kept else ""


def case_label(item: pytest.Item) -> str:
    """A parametrised test's case in words, shown beside its property: a short text parameter as itself,
    any other as name=value ("decode, batch=3", "dtype=float16", "content='bpe v1\\npatern…'"); "" when the
    test is not parametrised."""
    spec = getattr(item, "callspec", None)
    if spec is None:
        return ""
    shown = [_shown(name, value) for name, value in spec.params.items()]
    return ", ".join(dict.fromkeys(shown))  # ("alpha", "alpha") reads "alpha", once


def _shown(name: str, value) -> str:
    if isinstance(value, str) and value.isprintable() and 0 < len(value) <= 40 and "'" not in value:
        return value
    text = repr(value).removeprefix("torch.")
    return f"{name}={text if len(text) <= 32 else text[:31] + '…'}"


def _where(excinfo: pytest.ExceptionInfo, target: str | None) -> str:
    """ " (at file.py:LINE, in Class.func)" for the innermost frame in the learner's file (or, failing that, in
    any file that is not the suite's, the plugin's or a library's)."""
    entries = list(reversed(excinfo.traceback))
    mine = [e for e in entries if target and str(e.path) == target]
    others = [
        e for e in entries if not any(part in str(e.path) for part in ("/tests/", "site-packages", "/dojo/"))
    ]
    for entry in mine or others:
        name = getattr(entry.frame.code.raw, "co_qualname", entry.name)  # "PagedKVCache.__init__"
        return f" (at {Path(str(entry.path)).name}:{entry.lineno + 1}, in {name})"
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
    if unwritten(exc):  # a stub's: "not written yet" is what a report folds (dojo.practice.fold)
        return f"NotImplementedError: not written yet{where or (f' (in {exc})' if str(exc) else '')}"
    if type(exc).__name__ == "BoundaryError":  # judge mode: the worker died, hung or broke the protocol
        from dojo.grading.judging import judge

        return f"{judge.describe_failure(exc) or exc}{where}"
    return f"{type(exc).__name__}: {exc}{where}"
