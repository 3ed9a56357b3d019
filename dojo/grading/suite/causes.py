"""Failures that point at their cause: a composite property's failure explained by a basic one.

A suite orders its tests from basic to composite, and marks a composite test with the basic tests
whose failure would explain its own: `@pytest.mark.builds_on("test_grouped_query_head_mapping")`.
When one of those already failed in this run, the composite test's message starts with
"probably because '<its property>' failed; fix that first" (the first named that failed), its own
message kept below: the first failure a learner reads names the bug, the later ones say where they
come from.

Left out: reordering tests (the suite's order is the file's; tests/dojo/test_causes.py checks each
named test exists and comes earlier) and any guess beyond what the marker names.
"""

from __future__ import annotations

import re

import pytest

MARKER = "builds_on"
_FAILED = pytest.StashKey[dict]()  # test function name -> its property, for each that failed so far


def function_name(name: str) -> str:
    """A test's function name without its parameters: "test_x[fp16]" -> "test_x"."""
    return re.sub(r"\[.*\]$", "", name)


def bases(item: pytest.Item) -> list[str]:
    """The basic tests `item` builds on (function names), from its builds_on markers."""
    return [name for marker in item.iter_markers(MARKER) for name in marker.args]


def explain(item: pytest.Item, prop: str, failed: bool, message: str) -> str:
    """Record this test's outcome; return its message, prefixed with the failed bases it builds on."""
    seen = item.config.stash.setdefault(_FAILED, {})
    if not failed:
        return message
    seen.setdefault(function_name(item.name), prop)
    cause = next((seen[name] for name in bases(item) if name in seen), None)  # the first named that failed
    if cause is None:
        return message
    return f"probably because '{cause}' failed; fix that first\n{message}"
