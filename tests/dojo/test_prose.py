"""A kata's prompt in the terminal (`dojo start`): rendered Markdown, paged when taller than the screen on a
terminal, plain text with code intact in a pipe."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from dojo import catalog
from dojo.practice import prose

PROMPT = """# Title

Some `code` and **bold** words, and a [link](http://example.com).

## API

```python
def f(x: int) -> int: ...  # a comment that makes this code line rather long, longer than the plain width of 100 columns
```

- one
- two
"""


def code_lines(markdown: str) -> list[str]:
    """The lines of the fenced code blocks in `markdown`."""
    lines, inside = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


def test_plain_text_has_no_markdown_markup():
    """Outside a terminal the prompt is rendered to plain text: no #, backticks, ** or escape codes, no
    trailing spaces, and a code line longer than the width is not wrapped"""
    text = prose.render_plain(PROMPT)
    lines = text.splitlines()
    assert "Title" in lines and "API" in lines, text
    assert "Some code and bold words, and a link." in text, text
    assert not re.search(r"^#|`|\*\*|\x1b", text, re.MULTILINE), text
    assert all(line == line.rstrip() for line in lines), "trailing spaces"
    assert any(code_lines(PROMPT)[0] in line for line in lines), f"the code line was wrapped:\n{text}"
    assert "• one" in text and "• two" in text


@pytest.mark.parametrize("slug", [k.slug for k in catalog.load()])
def test_every_kata_prompt_keeps_its_code_whole(slug):
    """Each kata's README, as plain text, holds every line of its code blocks unbroken"""
    readme = catalog.get(slug).readme()
    lines = prose.render_plain(readme).splitlines()
    for code in code_lines(readme):
        assert any(code in line for line in lines), (
            f"{slug}: code line {code!r} broken in the plain rendering"
        )


def run_in_terminal(dojo, rows: int, pager_file: Path) -> str:
    """`dojo start toy` on a pseudo-terminal of `rows` x 100, $PAGER writing what it is given to `pager_file`;
    what the terminal showed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, 100, 0, 0))
    env = {k: v for k, v in dojo.env.items() if k != "NO_COLOR"} | {
        "TERM": "xterm-256color",
        "PAGER": f"cat > {pager_file}",
    }
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dojo", "start", "toy"],
        env=env,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process has gone and closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0, shown.decode(errors="replace")
    return shown.decode(errors="replace")


def visible(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")


def test_start_on_a_terminal_renders_and_pages_a_tall_prompt(dojo, tmp_path):
    """On a terminal `dojo start` shows the rendered prompt (no raw Markdown), through the pager when it is
    taller than the screen and straight to the terminal when it fits"""
    paged = tmp_path / "paged.txt"
    shown = run_in_terminal(dojo, rows=5, pager_file=paged)
    assert paged.is_file(), f"a prompt taller than 5 rows did not go through $PAGER:\n{shown}"
    text = visible(paged.read_text())
    assert "Implement add(a, b) and count_words(text)." in text and ">>> add(2, 3)" in text, text
    assert "\x1b[" in paged.read_text(), "the pager got no colours"
    assert text.lstrip().startswith(prose.PAGER_NOTE) and "q closes" in prose.PAGER_NOTE, text[:200]
    assert not re.search(r"^#|`", text, re.MULTILINE), text
    assert "Edit " in visible(shown), "the lines after the prompt are missing"

    paged.unlink()
    (dojo.workspace / "toy.py").unlink()
    shown = visible(run_in_terminal(dojo, rows=200, pager_file=paged))
    assert not paged.exists(), "a prompt that fits the screen was paged"
    assert "Implement add(a, b) and count_words(text)." in shown and "## " not in shown, shown
