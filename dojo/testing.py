"""Helpers that hidden suites share: banned-shortcut checks by AST, readable comparisons."""

from __future__ import annotations

import ast
from pathlib import Path


def banned_uses(path: Path, names: set[str]) -> list[str]:
    """Every import or attribute/name use in the file at `path` that mentions one of `names`.

    Matches module imports (`import tiktoken`, `from tokenizers import X`), imported names and
    attribute access (`F.scaled_dot_product_attention`). Returns readable "line N: ..." entries.
    """
    tree = ast.parse(Path(path).read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        hits: list[str] = []
        if isinstance(node, ast.Import):
            hits = [a.name for a in node.names if a.name.split(".")[0] in names or a.name in names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod.split(".")[0] in names or mod in names:
                hits = [mod]
            hits += [a.name for a in node.names if a.name in names]
        elif isinstance(node, ast.Attribute) and node.attr in names:
            hits = [node.attr]
        elif isinstance(node, ast.Name) and node.id in names:
            hits = [node.id]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            hits = [node.value]  # importlib.import_module("tiktoken") and friends
        found += [f"line {node.lineno}: {h}" for h in hits]
    return sorted(set(found))


def expect_raises(exc_type: type[BaseException], fn, what: str) -> BaseException:
    """Call fn(); the `exc_type` it raises, or a test failure saying what it did instead
    ("not written yet (NotImplementedError), want ValueError" for a stub)."""
    import pytest

    from dojo.plugin import raised

    try:
        fn()
    except exc_type as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - the wrong exception is the finding
        pytest.fail(f"{what}: {raised(exc)}, want {exc_type.__name__}", pytrace=False)
    pytest.fail(f"{what}: raised nothing, want {exc_type.__name__}", pytrace=False)


def expect_value_error(fn, what: str) -> ValueError:
    """Call fn(); the ValueError it raises, or a test failure saying what it did instead."""
    return expect_raises(ValueError, fn, what)
