"""Errors every layer of dojo may raise and the command line turns into an exit code.

`UsageError` is a mistake in how dojo was called (a missing kata name, a path that is not a
notebook): the feature that finds it raises it, `dojo.cli` prints it as one line and exits 2.
Errors of one layer alone live with it (catalog.UnknownKata, grading's NoSuite, history's
ProgressDBError). Nothing else is here.
"""

from __future__ import annotations


class UsageError(Exception):
    """A mistake in how dojo was called: printed as one line, exit code 2."""
