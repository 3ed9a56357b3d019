"""Learner code that misbehaves, and a progress database that does: a clear result, nothing lost."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

WORKS = "def add(a, b):\n    return a + b\n\n"
COUNTS = "def count_words(text):\n    return {w: text.split().count(w) for w in text.split()}\n"

FAULTS = {
    # name: (learner file, text expected in the failing test's message)
    "loops forever": (
        "def add(a, b):\n    while True:\n        pass\n\n" + COUNTS,
        "an infinite loop",
    ),
    "loops forever at import": ("while True:\n    pass\n" + WORKS + COUNTS, "an infinite loop"),
    "allocates without bound": (
        "def add(a, b):\n    hog = []\n    while True:\n        hog.append(bytearray(50_000_000))\n\n"
        + COUNTS,
        "MemoryError: ran out of memory",
    ),
    "calls sys.exit at import": (
        "import sys\nsys.exit(3)\n" + WORKS + COUNTS,
        "called sys.exit(3) while being imported",
    ),
    "calls sys.exit in a function": (
        "import sys\n\ndef add(a, b):\n    sys.exit(0)\n\n" + COUNTS,
        "called sys.exit(0) (at toy.py:4, in add)",
    ),
    "calls os._exit": (
        WORKS + "def count_words(text):\n    import os\n    os._exit(0)\n",
        "exited with code 0 before it finished while testing 'count_words counts repeated words'",
    ),
    "segfaults": (
        WORKS + "def count_words(text):\n    import ctypes\n    ctypes.string_at(0)\n",
        "crashed with a segmentation fault while testing 'count_words counts repeated words'",
    ),
    "raises at import": (
        "raise RuntimeError('half-written')\n" + WORKS + COUNTS,
        "raised at import: RuntimeError: half-written",
    ),
    "prints without end": (
        WORKS + "def count_words(text):\n    while True:\n        print('x' * 100_000)\n",
        "more output than the grader allows",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_gives_a_failed_result_with_a_reason(dojo, fault):
    """misbehaving learner code fails with a readable reason, in bounded time; DB and results stay valid"""
    source, reason = FAULTS[fault]
    dojo.write(source)
    started = time.time()
    out = dojo("check", "toy", "--timeout", "4")
    assert time.time() - started < 30
    assert out.returncode == 1, out.stdout + out.stderr
    assert reason in out.stdout, out.stdout
    doc = json.loads(dojo.results().read_text())
    assert doc["status"] in ("fail", "error") and any(reason in (t["message"] or "") for t in doc["tests"])
    assert len(dojo.attempts()) == 1
    assert len(out.stdout) < 20_000


def test_printing_megabytes_does_not_flood_the_report(dojo):
    """a solution that prints megabytes still passes, and the report stays short"""
    dojo.write("def add(a, b):\n    print('y' * 5_000_000)\n    return a + b\n\n" + COUNTS)
    out = dojo("check", "toy")
    assert out.returncode == 0, out.stdout
    assert len(out.stdout) < 5_000


def test_editing_the_tests_or_reference_changes_nothing(dojo):
    """learner code that rewrites the suite and the reference is graded on pristine copies, and is told"""
    suite, reference = dojo.suite.read_text(), dojo.reference.read_text()
    dojo.write(
        "from pathlib import Path\n"
        f"Path({str(dojo.suite)!r}).write_text('def test_nothing():\\n    pass\\n')\n"
        f"Path({str(dojo.reference)!r}).write_text('')\n"
        "def add(a, b):\n    return 0\n\n" + COUNTS
    )
    out = dojo("check", "toy")
    assert out.returncode == 1 and "Score 3/6 points" in out.stdout
    assert "pristine copies" in out.stdout
    assert (
        f"{dojo.suite} changed while your code was being graded (this grade used the pristine copy)"
        in out.stdout
    )
    assert f"{dojo.reference} changed" in out.stdout and f"git checkout -- {dojo.reference}" in out.stdout
    dojo.suite.write_text(suite)
    dojo.reference.write_text(reference)
    dojo.write(WORKS + COUNTS)
    assert "changed" not in dojo("check", "toy").stdout  # a clean run says nothing of the sort


def test_two_checks_at_once_are_both_recorded(dojo):
    """two `dojo check` runs at once: both attempts land in the database, the results file is whole"""
    dojo.write(WORKS + COUNTS)
    procs = [dojo.popen("check", "toy") for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"a concurrent check failed:\n{out}\n{err}"
    assert dojo.attempts() == [("toy", "check", 6, 6, 1)] * 2
    assert json.loads(dojo.results().read_text())["status"] == "pass"


def test_corrupt_database_is_backed_up_not_dropped(dojo):
    """a corrupt progress database: a clear warning, the file moved to a backup, a fresh one used"""
    dojo.db.parent.mkdir(parents=True)
    dojo.db.write_bytes(b"this is not sqlite" * 100)
    out = dojo("list")
    assert out.returncode == 0, out.stderr
    assert "unreadable" in out.stderr and "moved to" in out.stderr
    backups = list(dojo.db.parent.glob("progress.sqlite.bak-*"))
    assert [b.read_bytes() for b in backups] == [b"this is not sqlite" * 100]
    dojo("start", "toy")
    assert "in progress" in dojo("list").stdout


def test_newer_database_is_refused_and_kept(dojo):
    """a database from a newer dojo: refused with a clear message, kept as is, and a copy made"""
    dojo.db.parent.mkdir(parents=True)
    with sqlite3.connect(dojo.db) as conn:
        conn.execute("CREATE TABLE future (x)")
        conn.execute("PRAGMA user_version = 99")
    before = dojo.db.read_bytes()
    out = dojo("list")
    assert out.returncode == 1
    assert "schema version 99, newer than" in out.stderr and "newer decode-dojo" in out.stderr
    assert dojo.db.read_bytes() == before
    assert [b.read_bytes() for b in dojo.db.parent.glob("progress.sqlite.bak-*")] == [before]


def test_a_broken_suite_is_reported_as_such(dojo):
    """a suite that does not import: an error result naming the suite's problem, not the learner's"""
    dojo.write(WORKS + COUNTS)
    dojo.suite.write_text(dojo.suite.read_text() + "\ndef broken(:\n")
    out = dojo("check", "toy")
    assert out.returncode == 1
    assert "the test suite could not run" in out.stdout and "SyntaxError" in out.stdout
    assert json.loads(dojo.results().read_text())["status"] == "error"
