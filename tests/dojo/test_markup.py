"""Square brackets survive rich: messages that name optional arguments (`dojo interview [kata]`) and
paths with brackets in them print as written, not as swallowed markup tags.

One static check (every console print in dojo/ with markup on has no bracket outside a style tag in its
literal text) and the CLI driven in a toy workspace whose path holds brackets.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

from dojo import ROOT

STYLE_TAG = re.compile(r"\[/?(bold|dim|red|green|yellow|cyan|italic|underline)( [a-z]+)*\]|\\\[")


def _markup_prints():
    for path in sorted((ROOT / "dojo").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "print"
                and node.args
            ):
                continue
            if any(k.arg == "markup" and getattr(k.value, "value", True) is False for k in node.keywords):
                continue
            arg = node.args[0]
            parts = (
                [arg]
                if isinstance(arg, ast.Constant)
                else arg.values
                if isinstance(arg, ast.JoinedStr)
                else []
            )
            text = "".join(p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str))
            yield f"{path.relative_to(ROOT)}:{node.lineno}", text


def test_no_console_string_has_a_bare_bracket():
    """a literal '[' printed with markup on is either a style tag or escaped ('\\[')"""
    bare = [where for where, text in _markup_prints() if "[" in STYLE_TAG.sub("", text)]
    assert not bare, f"unescaped '[' passed to rich at {bare}"


def test_messages_keep_their_brackets(dojo):
    """no interview in progress: the message names `dojo interview [kata]`; the welcome screen names
    [kata] and [topic]; help texts show their optional arguments in brackets"""
    for args in (("submit",), ("interview", "--resume")):
        out = dojo(*args)
        assert "`dojo interview [kata]` starts one" in out.stdout, out.stdout
    welcome = dojo().stdout
    assert "dojo interview [kata]" in welcome and "ask [topic]" in welcome
    assert "[slug]" in dojo("interview", "--help").stdout
    assert "[topic]" in dojo("ask", "--help").stdout


def test_paths_with_brackets_print_whole(tmp_path, dojo):
    """a workspace under a folder named 'ws[kata]' is printed with its brackets by start and status"""
    dojo.workspace = tmp_path / "ws[kata]"
    dojo.env["DOJO_WORKSPACE"] = str(dojo.workspace)
    out = dojo("start", "toy")
    assert f"{dojo.workspace}/toy.py" in out.stdout, out.stdout
    dojo.file().write_text("# my work\n" + dojo.file().read_text())
    assert f"in {dojo.workspace}/toy.py: kept it" in dojo("start", "toy").stdout
    assert f"File: {dojo.workspace}/toy.py" in dojo("status").stdout


def test_help_of_every_command_parses():
    """`dojo --help` lists the commands (a smoke check that help text is printed verbatim by argparse)"""
    out = subprocess.run(
        [sys.executable, "-m", "dojo", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0 and "interview" in out.stdout and "[-h]" in out.stdout
