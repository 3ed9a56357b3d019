"""Which hint `dojo hint` gives: the next unseen one for the most basic property that fails.

Each hint in HINTS.md may name the tests it helps with ("Helps: test_a, test_b", see
dojo.catalog). The last check's results (workspace/results/<slug>.json) list the tests in the
suite's order, basic to composite, so the first failing test that some unseen hint helps with picks
it. Without results, failures or a matching hint, hints come in HINTS.md's order (`--next`).

Left out: weighing points or how many tests a hint helps with; the suite's order already says which
property to fix first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path


def failing_tests(results: Path) -> list[str]:
    """Function names of the failed tests in the last check, in the suite's order (none if unreadable)."""
    try:
        tests = json.loads(results.read_text()).get("tests", [])
    except (OSError, ValueError, AttributeError):
        return []
    names = [re.sub(r"\[.*\]$", "", t.get("name", "")) for t in tests
             if isinstance(t, dict) and t.get("status") in ("fail", "skip", "error")]
    return list(dict.fromkeys(names))


def choose(helps: list[list[str]], seen: set[int], failing: list[str]) -> int | None:
    """The 1-based number of the hint to give: the first unseen hint that helps with the first failing
    test some unseen hint helps with; else the first unseen; None when all are seen."""
    unseen = [n for n in range(1, len(helps) + 1) if n not in seen]
    for test in failing:
        for n in unseen:
            if test in helps[n - 1]:
                return n
    return unseen[0] if unseen else None
