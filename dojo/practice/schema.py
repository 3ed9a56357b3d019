"""The progress database's schema: MIGRATIONS[i] brings a database at version i to version i + 1.

The version lives in `PRAGMA user_version` and dojo.practice.history applies what is missing, in
one transaction, when it opens the file. A new table is one more entry at the end; an entry
already released is never edited (a learner's database ran it). Nothing else is here.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[str, ...]] = [
    (  # version 1: the practice loop
        """CREATE TABLE attempts (
            id INTEGER PRIMARY KEY, kata TEXT NOT NULL, mode TEXT NOT NULL, target TEXT NOT NULL,
            started REAL NOT NULL, ended REAL NOT NULL, points INTEGER NOT NULL, total INTEGER NOT NULL,
            passed INTEGER NOT NULL, tests INTEGER NOT NULL, failed INTEGER NOT NULL, error TEXT)""",
        "CREATE INDEX attempts_kata ON attempts (kata, ended)",
        """CREATE TABLE hints (
            id INTEGER PRIMARY KEY, kata TEXT NOT NULL, hint INTEGER NOT NULL, at REAL NOT NULL,
            UNIQUE (kata, hint))""",
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY, kata TEXT NOT NULL, kind TEXT NOT NULL, at REAL NOT NULL,
            detail TEXT NOT NULL DEFAULT '')""",
    ),
    (  # version 2: mock interviews (dojo.interview.session): a session, its answers, one scorecard each
        """CREATE TABLE sessions (
            id INTEGER PRIMARY KEY, kata TEXT NOT NULL, started REAL NOT NULL, minutes REAL NOT NULL,
            timer INTEGER NOT NULL, phase TEXT NOT NULL, questions TEXT NOT NULL,
            check_runs INTEGER NOT NULL DEFAULT 0, hints TEXT NOT NULL DEFAULT '[]',
            submitted REAL, submitted_by TEXT, points INTEGER, total INTEGER, tests INTEGER,
            tests_passed INTEGER, attempt INTEGER)""",
        "CREATE UNIQUE INDEX one_open_session ON sessions ((phase != 'done')) WHERE phase != 'done'",
        """CREATE TABLE session_answers (
            id INTEGER PRIMARY KEY, session INTEGER NOT NULL, number INTEGER NOT NULL, question TEXT NOT NULL,
            answer TEXT NOT NULL, covered TEXT NOT NULL, rubric INTEGER NOT NULL, UNIQUE (session, number))""",
        """CREATE TABLE scorecards (
            id INTEGER PRIMARY KEY, session INTEGER NOT NULL UNIQUE, kata TEXT NOT NULL, written REAL NOT NULL,
            score REAL NOT NULL, verdict TEXT NOT NULL, card TEXT NOT NULL)""",
    ),
    (  # version 3: timing tests a busy machine could not decide (dojo.testing), not counted either way
        "ALTER TABLE sessions ADD COLUMN inconclusive INTEGER NOT NULL DEFAULT 0",
    ),
]
