"""Reading a typed answer to a follow-up question: several lines, in the editor the learner knows.

On a terminal: $VISUAL or $EDITOR when set, else prompt_toolkit's multi-line input when it is installed.
Anywhere else, and on a terminal with neither, plain lines ending at a line holding only "." or at end
of input. The answer is Markdown. End of input before any line raises EOFError, so a caller can stop
and resume. Showing and marking the answer is dojo.interview.ask's.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile

END = "."  # a line holding only this ends a plain multi-line answer
COMMENT = "#"  # the question's lines in the editor's file, dropped when read back


def how(interactive: bool | None = None) -> str:
    """Which way an answer will be read: 'editor', 'prompt_toolkit' or 'lines'."""
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if not interactive:
        return "lines"
    if _editor():
        return "editor"
    try:
        import prompt_toolkit  # noqa: F401
    except ImportError:
        return "lines"
    return "prompt_toolkit"


def instructions(way: str) -> str:
    """One line telling the learner how to type and finish an answer read `way`."""
    return {
        "editor": f"Your answer: opening {_editor()}; write Markdown, save and quit to hand it in.",
        "prompt_toolkit": "Your answer (Markdown, several lines; Esc then Enter to finish):",
        "lines": f"Your answer (Markdown, several lines; a line with only '{END}', or Ctrl-D, ends it):",
    }[way]


def read_answer(question: str, *, way: str | None = None) -> str:
    """The learner's answer to `question`, stripped ('' for a blank answer). Prints `instructions(way)`
    first. Raises EOFError at end of input before any line, and RuntimeError when the editor fails."""
    way = way or how()
    sys.stdout.write(instructions(way) + "\n")
    sys.stdout.flush()
    if way == "editor":
        return _from_editor(question)
    if way == "prompt_toolkit":
        from prompt_toolkit import prompt

        return prompt("> ", multiline=True, prompt_continuation="> ").strip()
    return _from_lines()


def _from_lines() -> str:
    lines = []
    while True:
        line = sys.stdin.readline()
        if not line:
            if not lines:
                raise EOFError
            break
        if line.strip() == END:
            break
        lines.append(line.rstrip("\n"))
    return "\n".join(lines).strip()


def _editor() -> str:
    return os.environ.get("VISUAL") or os.environ.get("EDITOR") or ""


def _from_editor(question: str) -> str:
    header = "".join(f"{COMMENT} {line}\n" for line in question.splitlines())
    header += f"{COMMENT} Write your answer below (Markdown). These comment lines are dropped.\n\n"
    with tempfile.NamedTemporaryFile("w", suffix=".md", prefix="dojo-answer-", delete=False) as f:
        f.write(header)
    try:
        done = subprocess.run([*shlex.split(_editor()), f.name], check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the editor ({_editor()}) exited with status {done.returncode}")
        with open(f.name) as written:
            text = written.read()
    finally:
        os.unlink(f.name)
    ours = set(header.splitlines()) - {""}
    kept = [line for line in text.splitlines() if line not in ours]
    return "\n".join(kept).strip()
