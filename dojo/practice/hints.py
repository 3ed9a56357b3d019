"""Which hint `dojo hint` gives: the next unseen one for the most basic property that fails.

A hint in HINTS.md may name the tests it helps with ("Helps: test_a, test_b"). The last check's
results list the tests in the suite's order, basic to composite, so the first failing test that an
unseen hint helps with picks it. Without results, failures or a matching hint, hints come in
HINTS.md's order.
"""

from __future__ import annotations

import json
import re
from pathlib import Path


def failures(results: Path) -> list[tuple[str, str]]:
    """(function name, property) of each failed test in the last check, in the suite's order, one per
    function (none if unreadable)."""
    try:
        tests = json.loads(results.read_text()).get("tests", [])
    except (OSError, ValueError, AttributeError):
        return []
    found: dict[str, str] = {}
    for t in tests:
        if isinstance(t, dict) and t.get("status") in ("fail", "skip", "error"):
            found.setdefault(
                re.sub(r"\[.*\]$", "", str(t.get("name", ""))), str(t.get("property") or t.get("name", ""))
            )
    return list(found.items())


def pick(helps: list[list[str]], seen: set[int], failing: list[str]) -> tuple[int | None, str | None]:
    """The 1-based number of the hint to give and the failing test that chose it: the first unseen hint
    that helps with the first failing test some unseen hint helps with; else the first unseen, chosen by
    no test; (None, None) when all are seen."""
    unseen = [n for n in range(1, len(helps) + 1) if n not in seen]
    for test in failing:
        for n in unseen:
            if test in helps[n - 1]:
                return n, test
    return (unseen[0] if unseen else None), None


def choose(helps: list[list[str]], seen: set[int], failing: list[str]) -> int | None:
    """The 1-based number of the hint to give (pick's), None when all are seen."""
    return pick(helps, seen, failing)[0]
