"""`dojo prompt` shows a started kata's prompt again; `dojo solution` names the file it shows and pages
it when it is taller than the terminal."""

from __future__ import annotations

import contextlib
import io

from rich.console import Console

from dojo.practice import prose


def test_prompt_again(dojo):
    """after `dojo start`, `dojo prompt` (and `dojo prompt toy`) print the rendered prompt; before, a usage error"""
    out = dojo("prompt", "toy")
    assert out.returncode == 2 and "`dojo start toy`" in out.stderr
    dojo("start", "toy")
    for args in (("prompt",), ("prompt", "toy")):
        out = dojo(*args)
        assert out.returncode == 0, out.stderr
        assert "Implement add(a, b)" in out.stdout and "## " not in out.stdout


def test_solution_has_a_header_naming_the_file(dojo):
    """`dojo solution toy --force --yes` opens with the reference's path and length, then the code"""
    out = dojo("solution", "toy", "--force", "--yes")
    assert out.returncode == 0, out.stderr
    first, rest = out.stdout.split("\n", 1)
    lines = dojo.reference.read_text().count("\n")
    assert first.startswith("Reference solution for toy: ") and first.endswith(f"toy.py ({lines} lines)")
    assert "def add(a: int, b: int)" in rest


class _Terminal(Console):
    """A terminal console of a given height that records whether it paged."""

    def __init__(self, height: int):
        super().__init__(file=io.StringIO(), force_terminal=True, height=height, width=80, color_system=None)
        self.paged = False

    @contextlib.contextmanager
    def pager(self, *args, **kwargs):
        self.paged = True
        yield


def test_paged_only_when_taller_than_the_screen():
    """prose.paged goes through the pager on a terminal when the text is taller than it, else prints"""
    tall, short = _Terminal(height=10), _Terminal(height=10)
    prose.paged(tall, "header", "x\n" * 40, height=41)
    prose.paged(short, "header", "x\n" * 3, height=4)
    assert tall.paged and not short.paged
    assert short.file.getvalue().startswith("header\n")
