"""A kata's Markdown prose (its prompt, a hint) as a learner reads it in a terminal, or in a pipe.

`show()` renders the Markdown with rich. On a terminal with colours, a rendering taller than the
screen goes through the system pager (`$PAGER`, else `less`). Anywhere else (a pipe, a file,
NO_COLOR) it is the same rendering as plain text: no escape codes, prose wrapped at WIDTH columns,
code blocks never wrapped.
"""

from __future__ import annotations

import io
import os

from rich.console import Console
from rich.markdown import Heading, Markdown

WIDTH = 100  # columns of plain text, unless a code line needs more
PAGER_NOTE = "(paged: space or the arrows scroll, q closes)"  # the first line a paged text shows


class _Heading(Heading):
    LEVEL_ALIGN = {**Heading.LEVEL_ALIGN, "h1": "left"}  # rich centres the title; a prompt reads better flush


class Document(Markdown):
    """rich's Markdown with every heading flush left."""

    elements = {**Markdown.elements, "heading_open": _Heading}


def render_plain(text: str) -> str:
    """The Markdown `text` rendered as plain text (no escape codes), code blocks unwrapped."""
    width = max([WIDTH, *(len(line) + 4 for line in text.splitlines())])  # + rich's code padding and indent
    con = Console(
        file=io.StringIO(),
        width=width,
        color_system=None,
        highlight=False,
        emoji=False,
        force_terminal=False,
        force_jupyter=False,
    )
    con.print(Document(text))
    return "\n".join(line.rstrip() for line in con.file.getvalue().rstrip("\n").splitlines())


def show(out: Console, text: str, *, page: bool = True) -> None:
    """Print the Markdown `text` on `out`: rendered with colours on a terminal (paged when taller than the
    screen, unless `page` is False), as plain text elsewhere."""
    if out.is_terminal and out.color_system is not None:
        doc = Document(text)
        height = len(out.render_lines(doc, pad=False))
    else:
        doc = render_plain(text)
        height = doc.count("\n") + 1
    paged(out, doc, height=height if page else 0)


def paged(out: Console, *renderables, height: int) -> None:
    """Print `renderables` (markup off) on `out`: through the system pager when `out` is a terminal and
    their `height` in lines is more than the screen's, else straight."""
    if out.is_terminal and height > out.height:
        os.environ.setdefault("LESS", "FRX")
        with out.pager(styles=out.color_system is not None):
            out.print(PAGER_NOTE, style="dim", markup=False, highlight=False)
            for r in renderables:
                out.print(r, markup=False, highlight=False)
    else:
        for r in renderables:
            out.print(r, markup=False, highlight=False)
