"""The front door and the docs site say what the repository holds: the README's and the practice page's
kata tables agree with katas.toml, the README stays a front door, no page cites an issue number, and
every repository path a page names in backticks exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dojo import catalog

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
ROW = re.compile(r"^\| (\d+) \| `(\w+)` \| (.*?) \| (\d+) \|$", re.MULTILINE)


def rows(path: Path) -> list[tuple[int, str, str, int]]:
    return [(int(n), slug, text, int(last)) for n, slug, text, last in ROW.findall(path.read_text())]


def test_readme_kata_table_is_katas_toml():
    """README's table: every kata in practice order, with its title (and note) and its minutes."""
    want = [
        (k.number, k.slug, k.title + (f" ({k.note})" if k.note else ""), k.minutes) for k in catalog.load()
    ]
    assert rows(ROOT / "README.md") == want, "README.md's kata table differs from katas/katas.toml"


def test_practice_page_kata_table_has_each_katas_difficulty():
    """docs/practice.md's table: every kata in practice order, with its difficulty."""
    got = [(n, slug, last) for n, slug, _, last in rows(ROOT / "docs" / "practice.md")]
    assert got == [(k.number, k.slug, k.difficulty) for k in catalog.load()], (
        "docs/practice.md's kata table differs from katas/katas.toml"
    )


def test_readme_is_a_front_door():
    """At most 200 lines; the details live in docs/."""
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= 200, f"README.md has {lines} lines: move the detail to a docs/ page"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers(page):
    """User-facing text never sends the reader to an issue tracker they cannot see."""
    found = re.findall(r"\b[Ii]ssues? #?\d+|(?<![\w&/])#\d{1,3}\b(?!-)", page.read_text())
    assert not found, f"{page.name} cites issue numbers: {found}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_paths_exist(page):
    """A `solutions/...`, `dojo/...`, `katas/...`, `tests/...` or `benchmarks/...` path in backticks is a
    file or folder of this repository (placeholders such as <slug>, and what a run writes, excepted)."""
    generated = ("benchmarks/results/",)  # `make bench` writes its reports there
    named = re.findall(r"`((?:solutions|dojo|katas|tests|benchmarks|docs)/[\w./-]*)`", page.read_text())
    missing = sorted(
        {p for p in named if not p.startswith(generated) and not (ROOT / p.rstrip("/")).exists()}
    )
    assert not missing, f"{page.name} names paths that do not exist: {missing}"
