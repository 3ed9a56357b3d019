"""Failures that point at their cause: a composite property's failure explained by a basic one.

A suite marks a composite test with the basic tests whose failure would explain its own:
`@pytest.mark.builds_on("test_grouped_query_head_mapping")`. When one of those already failed in
this run, the composite test's message starts with "probably because '<its property>' failed; fix
that first", its own message kept below. It reorders no tests and guesses nothing the marker does
not name.
"""

from __future__ import annotations

import re

import pytest

MARKER = "builds_on"
PREFIX = "probably because"  # how an explained failure's message starts
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
    return f"{PREFIX} '{cause}' failed; fix that first\n{message}"
