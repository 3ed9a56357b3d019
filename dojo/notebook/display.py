"""The grading report as a notebook shows it: which saved version was graded, then the report.

`NotebookReport` is what the grading cell returns: HTML for Jupyter (`_repr_html_`), plain text for
everything else (`repr`). Its first line says which version was graded ("as saved at 10:42:07, 3 min
ago"; in bold yellow when the kernel ran solution code since), then any warning, then
dojo.practice.report's lines. The HTML uses JupyterLab's theme colours, with fixed fallbacks; never
terminal escape codes.
"""

from __future__ import annotations

import html
import io
import re
import time

from rich.ansi import AnsiDecoder
from rich.console import Console
from rich.style import Style
from rich.text import Text

from dojo.grading.result import GradeResult
from dojo.practice import report

WIDTH = 100  # columns rich lays the report out in; lines are soft-wrapped, the browser wraps them
# rich's colour numbers (normal and bright alike) -> CSS. Each reads at >= 4.5:1 on JupyterLab's light
# and dark output backgrounds (tests/dojo/test_nbreport.py computes it from the themes' CSS).
COLOURS = {
    1: "var(--jp-error-color1, #c62828)",  # red: failures
    2: "var(--jp-success-color0, #2e7d32)",  # green: passes
    3: "color-mix(in srgb, var(--jp-warn-color0, #e65100) 70%, var(--jp-content-font-color0, currentColor))",
}
DIM = "var(--jp-content-font-color2, #757575)"
BLOCK = (
    "font-family: var(--jp-code-font-family, Menlo, Consolas, 'DejaVu Sans Mono', monospace); "
    "font-size: var(--jp-code-font-size, 13px); line-height: 1.4"
)
LINE = "white-space: pre-wrap; overflow-wrap: break-word; word-break: normal; padding-left: {indent}ch; min-height: 1.4em"
LINE_NUMBERS = "Cell line numbers: View > Show Line Numbers (JupyterLab)."
_CELL_LINE = re.compile(r"\bcell \d+, line \d+")


def saved_line(name: str, saved_at: float, now: float | None = None) -> str:
    """ "Graded toy.ipynb as saved at 10:42:07, 3 min ago": which version of the notebook a grade is of."""
    now = time.time() if now is None else now
    return f"Graded {name} as saved at {_clock(saved_at, now)}, {_span_of(now - saved_at)} ago"


def stale_line(saved_at: float, run: int, newer: float, *, at_least: bool, now: float | None = None) -> str:
    """ "Graded the saved notebook (saved 22:43:37); your last run of a solution cell (In [7]) is 2 min newer:
    ...": the saved-version line when the kernel ran solution code `newer` seconds after the save
    (`at_least`: that many or more)."""
    now = time.time() if now is None else now
    newer_by = f"{'at least ' if at_least else ''}{_span_of(newer)} newer"
    return (
        f"Graded the saved notebook (saved {_clock(saved_at, now)}); your last run of a solution cell "
        f"(In [{run}]) is {newer_by}: save (Ctrl-S / Cmd-S) and run this cell again."
    )


def _span_of(seconds: float) -> str:
    """ "9 s", "3 min", "2 h 1 min" (whole units, never negative)."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _clock(at: float, now: float) -> str:
    """ "10:42:07" on the day of `now`, else "2026-12-01 10:42:07" (local time)."""
    day = (
        ""
        if time.localtime(at)[:3] == time.localtime(now)[:3]
        else time.strftime("%Y-%m-%d ", time.localtime(at))
    )
    return day + time.strftime("%H:%M:%S", time.localtime(at))


class NotebookReport:
    """A grading shown in a notebook: HTML for Jupyter (`_repr_html_`), plain text elsewhere (`repr`)."""

    def __init__(
        self,
        result: GradeResult | None = None,
        *,
        error: str | None = None,
        warning: str | None = None,
        saved: str | None = None,
        stale: str | None = None,
        verdict: str = "",
        title: str = "",
    ):
        self.result, self.error, self.warning = result, error, warning
        con = Console(
            record=True,
            file=io.StringIO(),
            width=WIDTH,
            color_system="standard",
            force_terminal=True,
            force_jupyter=False,
            highlight=False,
            soft_wrap=True,
            emoji=False,
        )
        if stale:  # the save is older than the kernel's solution code: this line instead of `saved`
            con.print(Text(stale, style="bold yellow"))
        elif saved:
            con.print(Text(saved, style="bold"))
        if warning:
            con.print(Text(f"Warning: {warning}", style="bold yellow"))
        if result is not None:
            report.show_result(result, con, title=title)
            if verdict:
                con.print(verdict)
            if any(_CELL_LINE.search(t.message or "") for t in result.tests) or _CELL_LINE.search(
                result.error or ""
            ):
                con.print(Text(LINE_NUMBERS, style="dim"))
        if error:
            con.print(Text(f"Cannot grade: {error}", style="bold red"))
        styled = con.export_text(styles=True, clear=False).rstrip("\n")
        self.text = con.export_text().rstrip("\n")
        self.html = to_html(list(AnsiDecoder().decode(styled)), con)

    @property
    def passed(self) -> bool:
        return self.result is not None and self.result.passed

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


def to_html(lines: list[Text], con: Console) -> str:
    """`lines` as HTML: one block per line, its leading spaces an indent that wrapped parts keep."""
    out = [f'<div class="dojo-report" style="{BLOCK}">']
    for line in lines:
        plain = line.plain
        indent = len(plain) - len(plain.lstrip(" "))
        body = "".join(_span(seg.text, seg.style) for seg in line[indent:].render(con))
        out.append(f'<div style="{LINE.format(indent=indent)}">{body}</div>')
    out.append("</div>")
    return "".join(out)


def _span(text: str, style: Style | None) -> str:
    css = []
    if style is not None:
        if style.color is not None and style.color.number is not None and style.color.number % 8 in COLOURS:
            css.append(f"color: {COLOURS[style.color.number % 8]}")
        elif style.dim:
            css.append(f"color: {DIM}")
        if style.bold:
            css.append("font-weight: bold")
    text = html.escape(text)
    return f'<span style="{"; ".join(css)}">{text}</span>' if css else text
