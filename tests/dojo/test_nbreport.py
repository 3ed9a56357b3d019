"""The notebook's grading report: the saved-version line, line blocks that keep their indent when
wrapped, and colours that read on JupyterLab's light and dark themes (computed from the themes' own CSS)."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser
from pathlib import Path

import jupyterlab
import pytest

from dojo.grading.result import GradeResult, TestResult
from dojo.notebook import display as nbreport

THEMES = Path(jupyterlab.__file__).parent / "themes" / "@jupyterlab"
ROLES = {
    "failure (red)": nbreport.COLOURS[1],
    "pass (green)": nbreport.COLOURS[2],
    "warning (yellow)": nbreport.COLOURS[3],
    "dim": nbreport.DIM,
}


def a_result(message: str) -> GradeResult:
    tests = [
        TestResult("t::a", "test_a", "add(2, 3) is 5", 1, True, "passed"),
        TestResult(
            "t::b",
            "test_b",
            "count_words splits on any run of whitespace, tabs and newlines included",
            2,
            False,
            "failed",
            message,
        ),
    ]
    return GradeResult(
        slug="toy",
        target="x",
        path="/tmp/toy.ipynb",
        tests=tests,
        points=1,
        total=3,
        passed=False,
        duration=0.5,
        started=0.0,
    )


class Lines(HTMLParser):
    """The report's line blocks: (style, text) of each <div> inside the dojo-report block."""

    def __init__(self):
        super().__init__()
        self.lines: list[list[str]] = []
        self.depth = 0
        self.colours: list[str] = []

    def handle_starttag(self, tag, attrs):
        style = dict(attrs).get("style", "")
        if tag == "div":
            self.depth += 1
            if self.depth == 2:
                self.lines.append([style, ""])
        self.colours += re.findall(r"(?<![-\w])color:\s*([^;]+)", style)

    def handle_endtag(self, tag):
        if tag == "div":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth == 2:
            self.lines[-1][1] += data


def test_saved_line_says_when_the_graded_version_was_saved():
    """The report's first line names the notebook, the time it was saved (local clock) and how long ago"""
    t = time.mktime((2026, 12, 1, 10, 42, 7, 0, 0, -1))
    assert nbreport.saved_line("toy.ipynb", t, t + 185) == "Graded toy.ipynb as saved at 10:42:07, 3 min ago"
    assert nbreport.saved_line("toy.ipynb", t, t + 9.8).endswith("at 10:42:07, 9 s ago")
    assert nbreport.saved_line("toy.ipynb", t, t + 2 * 3600 + 60).endswith("2 h 1 min ago")
    assert "saved at 2026-12-01 10:42:07" in nbreport.saved_line("toy.ipynb", t, t + 86400 * 2)
    assert nbreport.saved_line("toy.ipynb", t, t - 5).endswith("0 s ago"), "a clock behind the file's mtime"
    shown = nbreport.NotebookReport(
        a_result("boom"), saved="Graded toy.ipynb as saved at 10:42:07, 3 min ago"
    )
    assert repr(shown).splitlines()[0] == "Graded toy.ipynb as saved at 10:42:07, 3 min ago"


def test_stale_line_leads_the_report_in_bold():
    """A save older than the kernel's last solution run: the first line says when it was saved, which run is
    newer and by how much (a lower bound said as such), what to do, in bold, in place of the saved line"""
    t = time.mktime((2026, 12, 1, 22, 43, 37, 0, 0, -1))
    line = nbreport.stale_line(t, 7, 130, at_least=False, now=t + 200)
    assert line == (
        "Graded the saved notebook (saved 22:43:37); your last run of a solution cell (In [7]) is 2 min "
        "newer: save (Ctrl-S / Cmd-S) and run this cell again."
    )
    assert "(In [2]) is at least 9 s newer" in nbreport.stale_line(t, 2, 9.5, at_least=True, now=t + 20)
    assert "(saved 2026-12-01 22:43:37)" in nbreport.stale_line(t, 2, 90, at_least=False, now=t + 86400)
    shown = nbreport.NotebookReport(
        a_result("boom"), saved="Graded toy.ipynb as saved at 22:43:37", stale=line
    )
    assert repr(shown).splitlines()[0] == line and "as saved at" not in repr(shown), repr(shown)
    first = re.search(
        r'<div class="dojo-report"[^>]*><div[^>]*><span style="([^"]*)">([^<]*)</span>', shown.html
    )
    assert first and first.group(2) == line and "font-weight: bold" in first.group(1), (
        f"the first line is not bold: {shown.html[:400]}"
    )


def test_html_lines_keep_their_indent_when_wrapped():
    """Each report line is one block that wraps at spaces (never mid-word) with its indent as padding,
    so a wrapped failure message stays under its test line"""
    message = "AssertionError: count_words('a\\tb  c\\n'): got {'a\\tb': 1, 'c': 1}, want {'a': 1, 'b': 1, 'c': 1}\n    at line 2"
    shown = nbreport.NotebookReport(a_result(message), warning="this is a warning " * 12)
    parser = Lines()
    parser.feed(shown.html)
    text_lines = repr(shown).splitlines()
    assert len(parser.lines) == len(text_lines), "not one block per report line"
    for (style, text), line in zip(parser.lines, text_lines):
        indent = len(line) - len(line.lstrip(" "))
        assert f"padding-left: {indent}ch" in style, (
            f"{line!r}: indent {indent} not kept as padding ({style})"
        )
        assert text == line.lstrip(" "), f"block text {text!r} is not the line {line!r}"
        assert "white-space: pre-wrap" in style and "word-break: normal" in style and "break-all" not in style
    assert any("padding-left: 8ch" in s and t.startswith("AssertionError") for s, t in parser.lines)
    assert "<pre" not in shown.html and "\x1b[" not in shown.html


def test_failure_with_a_cell_line_says_how_to_show_line_numbers():
    """A report naming "cell N, line M" says how to show line numbers in JupyterLab; one without does not"""
    with_line = nbreport.NotebookReport(a_result("ValueError: boom (at cell 3, line 5, in add)"))
    assert nbreport.LINE_NUMBERS in repr(with_line) and "View > Show Line Numbers" in nbreport.LINE_NUMBERS
    assert nbreport.LINE_NUMBERS not in repr(nbreport.NotebookReport(a_result("want 5, got 4")))


# ---- contrast on JupyterLab's own themes --------------------------------------------------------


def theme_vars(name: str) -> dict[str, str]:
    css = THEMES / f"theme-{name}-extension" / "index.css"
    if not css.is_file():
        pytest.fail(f"JupyterLab's {name} theme is not at {css}: is jupyterlab installed (make setup)?")
    return dict(re.findall(r"(--[\w-]+):([^;}]+)", css.read_text()))


def split_top(text: str) -> list[str]:
    """`text` split at commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def rgba(expr: str, theme: dict[str, str]) -> tuple[float, float, float, float]:
    """A CSS colour as the browser resolves it: var() with fallbacks, hex, rgb[a](), white/black, and
    color-mix(in srgb, A p%, B)."""
    expr = expr.strip()
    if expr.startswith("var("):
        name, *fallback = split_top(expr[4:-1])
        return rgba(theme[name] if name in theme else fallback[0], theme)
    if expr.startswith("color-mix("):
        _, first, second = split_top(expr[len("color-mix(") : -1])
        colour, pct = first.rsplit(" ", 1)
        w = float(pct.rstrip("%")) / 100
        a, b = rgba(colour, theme), rgba(second, theme)
        return tuple(w * x + (1 - w) * y for x, y in zip(a, b))
    if expr.startswith("rgb"):
        r, g, b, *alpha = (float(x) for x in split_top(expr[expr.index("(") + 1 : -1]))
        return r, g, b, alpha[0] if alpha else 1.0
    if expr.startswith("#"):
        digits = expr[1:] if len(expr) == 7 else "".join(c * 2 for c in expr[1:])
        return (*(int(digits[i : i + 2], 16) for i in (0, 2, 4)), 1.0)
    return {"white": (255, 255, 255, 1.0), "black": (0, 0, 0, 1.0)}[expr]


def luminance(rgb) -> float:
    def channel(c):
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("role", list(ROLES))
def test_report_colours_read_on_both_themes(theme, role):
    """Every colour the report uses has at least 4.5:1 contrast (WCAG AA) on the theme's notebook background"""
    variables = theme_vars(theme)
    background = rgba("var(--jp-layout-color0)", variables)
    r, g, b, a = rgba(ROLES[role], variables)
    shown = [a * c + (1 - a) * bg for c, bg in zip((r, g, b), background[:3])]  # alpha over the background
    lighter, darker = sorted([luminance(shown), luminance(background[:3])], reverse=True)
    ratio = (lighter + 0.05) / (darker + 0.05)
    assert ratio >= 4.5, f"{role} text ({ROLES[role]}) has {ratio:.2f}:1 contrast on JupyterLab {theme}"


def test_report_uses_only_theme_colours():
    """Every colour in the report's HTML is one of the theme-aware colours, never a fixed one"""
    parser = Lines()
    parser.feed(nbreport.NotebookReport(a_result("boom"), warning="careful", error="bad").html)
    assert parser.colours, "the report has no colours at all"
    assert set(parser.colours) <= set(ROLES.values()), set(parser.colours) - set(ROLES.values())
