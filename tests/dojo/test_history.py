"""The progress database's API, in process: what the CLI and the interview build on."""

from __future__ import annotations

import sqlite3
import time

import pytest

from dojo.practice import history


def attempt(db, kata="toy", *, passed=True, points=6, total=6, mode="check", ended=None):
    ended = time.time() if ended is None else ended
    return history.record_attempt(
        kata,
        mode=mode,
        target="workspace",
        started=ended - 1,
        ended=ended,
        points=points,
        total=total,
        passed=passed,
        tests=4,
        failed=0 if passed else 4,
        path=db,
    )


def test_attempts_progress_and_current_kata(tmp_path):
    """attempts are stored in order; progress gives status and best score; the kata in progress is the latest"""
    db = tmp_path / "p.sqlite"
    assert history.current_kata(path=db) is None and history.progress(path=db) == {}
    with history.connect(db) as conn, history.transaction(conn):
        conn.execute("INSERT INTO events (kata, kind, at) VALUES ('bpe', 'start', ?)", (time.time() - 10,))
    attempt(db, "toy", passed=False, points=2, ended=time.time() - 3)
    attempt(db, "toy", passed=True, points=6, ended=time.time() - 2)
    attempt(db, "toy", passed=False, points=1, ended=time.time() - 1)
    assert [a.points for a in history.attempts("toy", path=db)] == [2, 6, 1]
    progress = history.progress(path=db)
    assert progress["toy"] == history.KataProgress("passing", 3, 6, 6, 0)
    assert progress["bpe"].status == "in progress" and progress["bpe"].attempts == 0
    assert history.current_kata(path=db) == "toy"
    history.record_event("bpe", "start", path=db)
    assert history.current_kata(path=db) == "bpe"
    assert history.has_passed("toy", path=db) and not history.has_passed("bpe", path=db)


def test_hints_are_recorded_once(tmp_path):
    """seeing a hint twice records it once"""
    db = tmp_path / "p.sqlite"
    for n in (1, 2, 1):
        history.record_hint("toy", n, path=db)
    assert history.hints_seen("toy", path=db) == [1, 2]
    history.record_reveal("toy", forced=True, path=db)
    assert [(k, kind, d) for k, kind, _, d in history.events("toy", "reveal", path=db)] == [
        ("toy", "reveal", "forced")
    ]


def test_schema_version_and_wal(tmp_path):
    """a new database is at the current schema version, in WAL mode"""
    db = tmp_path / "p.sqlite"
    with history.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_failed_write_leaves_nothing(tmp_path):
    """a transaction that raises is rolled back whole"""
    db = tmp_path / "p.sqlite"
    with pytest.raises(sqlite3.IntegrityError), history.connect(db) as conn, history.transaction(conn):
        conn.execute("INSERT INTO events (kata, kind, at) VALUES ('toy', 'start', 1)")
        conn.execute("INSERT INTO events (kata, kind, at) VALUES (NULL, 'start', 1)")
    assert history.events(path=db) == []


def test_corrupt_file_warns_and_is_kept(tmp_path):
    """a corrupt file: ProgressDBWarning naming the backup, whose bytes are the original's"""
    db = tmp_path / "p.sqlite"
    db.write_bytes(b"\x00garbage" * 64)
    with pytest.warns(history.ProgressDBWarning, match="moved to"):
        assert history.attempts(path=db) == []
    (backup,) = tmp_path.glob("p.sqlite.bak-*")
    assert backup.read_bytes() == b"\x00garbage" * 64
