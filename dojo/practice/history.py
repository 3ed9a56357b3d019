"""The progress database: attempts, hints seen, starts/resets/reveals, in SQLite.

One file, workspace/.dojo/progress.sqlite, in WAL mode, every write its own transaction: two `dojo`
processes at once both land their rows. Opening it applies what dojo.practice.schema's migrations add;
a corrupt file is moved to a backup and a fresh one started (ProgressDBWarning), and a file from a newer
dojo is refused (ProgressDBError). Nothing here prints.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dojo.practice.schema import MIGRATIONS
from dojo.targets import workspace_dir

SCHEMA_VERSION = len(MIGRATIONS)
BUSY_TIMEOUT_S = 30.0


class ProgressDBError(RuntimeError):
    """The progress database cannot be used (written by a newer dojo, or unreadable); the message says
    what to do and where the backup is."""


class ProgressDBWarning(UserWarning):
    """The progress database was corrupt: it was moved to a backup and a fresh one started."""


@dataclass(frozen=True)
class Attempt:
    id: int
    kata: str
    mode: str  # check | watch | examples (check --examples-only) | interview | ...
    target: str
    started: float
    ended: float
    points: int
    total: int
    passed: bool
    tests: int
    failed: int
    error: str | None


@dataclass(frozen=True)
class KataProgress:
    status: str  # "not started" | "in progress" | "passing"
    attempts: int
    best_points: int
    best_total: int
    hints_seen: int


def db_path() -> Path:
    return workspace_dir() / ".dojo" / "progress.sqlite"


@contextmanager
def connect(path: Path | None = None) -> Iterator[sqlite3.Connection]:
    """An open, migrated connection in autocommit mode; wrap writes in `with transaction(conn):`.

    Raises ProgressDBError for a database from a newer dojo. Warns ProgressDBWarning (and carries
    on with a fresh file) for a corrupt one.
    """
    path = Path(path) if path else db_path()
    conn = _open(path)
    try:
        yield conn
    finally:
        conn.close()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): the write lock is taken up front, so a concurrent
    writer waits (busy timeout) instead of failing half-way."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _open(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    attempt = 0
    while attempt < 2:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                conn.close()
                backup = _backup(path, move=False)
                raise ProgressDBError(
                    f"the progress database {path} has schema version {version}, newer than this dojo's "
                    f"{SCHEMA_VERSION}: it was written by a newer decode-dojo. Update decode-dojo "
                    f"(git pull && make setup), or move the file away to start afresh. A copy is at {backup}."
                )
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check}")
            conn.execute("PRAGMA journal_mode=WAL")
            _migrate(conn)
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" in str(exc) or "busy" in str(exc):
                # subtle: switching a new file to WAL needs a lock that the busy timeout does not wait
                # for, so two dojo processes creating the database at once retry here
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise ProgressDBError(f"the progress database {path} stayed locked: {exc}") from exc
            if attempt:
                raise ProgressDBError(f"cannot use the progress database {path}: {exc}") from exc
            _set_aside(path, exc)
        except sqlite3.DatabaseError as exc:  # not a database, malformed image, failed integrity check
            conn.close()
            if attempt:
                raise ProgressDBError(f"cannot use the progress database {path}: {exc}") from exc
            _set_aside(path, exc)
        attempt += 1
    raise AssertionError("unreachable")


def _set_aside(path: Path, exc: Exception) -> None:
    backup = _backup(path, move=True)
    warnings.warn(
        ProgressDBWarning(
            f"the progress database {path} was unreadable ({exc}); it was moved to {backup} "
            "and a fresh one started"
        ),
        stacklevel=4,
    )


def _backup(path: Path, *, move: bool) -> Path:
    """Copy (or move) the database and its -wal/-shm files to <name>.bak-<time>[-n]; returns the main copy."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.bak-{stamp}-{n}")
        n += 1
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{path}{suffix}")
        if src.exists():
            dst = Path(f"{backup}{suffix}")
            shutil.move(src, dst) if move else shutil.copy2(src, dst)
    return backup


def _migrate(conn: sqlite3.Connection) -> None:
    if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
        return
    with transaction(conn):  # re-read under the write lock: another process may have migrated meanwhile
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


# ---- writes ------------------------------------------------------------------------------------


def record_attempt(
    kata: str,
    *,
    mode: str,
    target: str,
    started: float,
    ended: float,
    points: int,
    total: int,
    passed: bool,
    tests: int,
    failed: int,
    error: str | None = None,
    path: Path | None = None,
) -> int:
    """Store one graded attempt; returns its id."""
    with connect(path) as conn, transaction(conn):
        cur = conn.execute(
            "INSERT INTO attempts (kata, mode, target, started, ended, points, total, passed, tests, failed, error)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (kata, mode, target, started, ended, points, total, int(passed), tests, failed, error),
        )
        return int(cur.lastrowid)


def record_result(result, *, mode: str = "check", path: Path | None = None) -> int:
    """Store a dojo.grading.grade.GradeResult as an attempt; returns its id. An examples-only run is stored with
    mode "examples" and never counts as a pass."""
    return record_attempt(
        result.slug,
        mode="examples" if result.examples_only else mode,
        target=result.target,
        started=result.started,
        ended=result.started + result.duration,
        points=result.points,
        total=result.total,
        passed=result.passed and not result.examples_only,
        tests=len(result.tests),
        failed=sum(1 for t in result.tests if t.outcome not in ("passed", "inconclusive")),
        error=result.error,
        path=path,
    )


def record_event(kata: str, kind: str, detail: str = "", *, path: Path | None = None) -> None:
    """Store a start, reset or reveal (or any other kind) of `kata`."""
    with connect(path) as conn, transaction(conn):
        conn.execute(
            "INSERT INTO events (kata, kind, at, detail) VALUES (?, ?, ?, ?)",
            (kata, kind, time.time(), detail),
        )


def record_hint(kata: str, hint: int, *, path: Path | None = None) -> None:
    """Mark hint number `hint` (1-based) of `kata` as seen; seeing it again changes nothing."""
    with connect(path) as conn, transaction(conn):
        conn.execute(
            "INSERT OR IGNORE INTO hints (kata, hint, at) VALUES (?, ?, ?)", (kata, hint, time.time())
        )


def record_reveal(kata: str, *, forced: bool, path: Path | None = None) -> None:
    """The reference of `kata` was shown; `forced` when it was shown before the kata passed."""
    record_event(kata, "reveal", "forced" if forced else "after pass", path=path)


# ---- reads -------------------------------------------------------------------------------------


def attempts(kata: str | None = None, *, path: Path | None = None) -> list[Attempt]:
    """Attempts in the order they ended, for one kata or all."""
    sql = "SELECT id, kata, mode, target, started, ended, points, total, passed, tests, failed, error FROM attempts"
    args: tuple = ()
    if kata is not None:
        sql, args = sql + " WHERE kata = ?", (kata,)
    with connect(path) as conn:
        rows = conn.execute(sql + " ORDER BY ended, id", args).fetchall()
    return [Attempt(*row[:8], bool(row[8]), *row[9:]) for row in rows]


def hints_seen(kata: str, *, path: Path | None = None) -> list[int]:
    with connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT hint FROM hints WHERE kata = ? ORDER BY hint", (kata,))]


def events(kata: str | None = None, kind: str | None = None, *, path: Path | None = None) -> list[tuple]:
    """(kata, kind, at, detail) rows in time order, filtered by kata and/or kind."""
    sql, args = "SELECT kata, kind, at, detail FROM events WHERE 1=1", []
    if kata is not None:
        sql, args = sql + " AND kata = ?", [*args, kata]
    if kind is not None:
        sql, args = sql + " AND kind = ?", [*args, kind]
    with connect(path) as conn:
        return conn.execute(sql + " ORDER BY at, id", args).fetchall()


def revealed(*, path: Path | None = None) -> set[str]:
    """The katas whose reference was shown before they passed (`dojo solution --force`)."""
    with connect(path) as conn:
        return {
            r[0] for r in conn.execute("SELECT kata FROM events WHERE kind = 'reveal' AND detail = 'forced'")
        }


def has_passed(kata: str, *, path: Path | None = None) -> bool:
    """Whether any full (not examples-only) attempt at `kata` passed every test."""
    with connect(path) as conn:
        row = conn.execute("SELECT 1 FROM attempts WHERE kata = ? AND passed = 1 LIMIT 1", (kata,)).fetchone()
    return row is not None


def current_kata(*, path: Path | None = None) -> str | None:
    """The kata in progress: the one most recently started, reset or checked in the practice loop."""
    with connect(path) as conn:
        row = conn.execute(
            "SELECT kata, at FROM events WHERE kind IN ('start', 'reset')"
            " UNION ALL SELECT kata, ended FROM attempts WHERE mode IN ('check', 'watch', 'examples')"
            " ORDER BY at DESC LIMIT 1"
        ).fetchone()
    return row[0] if row else None


def progress(*, path: Path | None = None) -> dict[str, KataProgress]:
    """Per-kata status for every kata that has any history (absent: not started)."""
    with connect(path) as conn:
        started = {
            r[0] for r in conn.execute("SELECT DISTINCT kata FROM events WHERE kind IN ('start', 'reset')")
        }
        hints = dict(conn.execute("SELECT kata, COUNT(*) FROM hints GROUP BY kata").fetchall())
        stats = conn.execute("SELECT kata, COUNT(*), MAX(passed) FROM attempts GROUP BY kata").fetchall()
        best = {}
        for kata, points, total in conn.execute(
            "SELECT kata, points, total FROM attempts ORDER BY kata, mode = 'examples', passed DESC,"
            " CAST(points AS REAL) / MAX(total, 1) DESC, ended DESC"
        ):
            best.setdefault(kata, (points, total))
    out: dict[str, KataProgress] = {}
    for kata, count, passed in stats:
        points, total = best[kata]
        out[kata] = KataProgress(
            "passing" if passed else "in progress", count, points, total, hints.get(kata, 0)
        )
    for kata in started | set(hints):
        out.setdefault(kata, KataProgress("in progress", 0, 0, 0, hints.get(kata, 0)))
    return out
