"""A Python file's source as the interpreter reads it (PEP 263), for every check that reads one.

`read_python(path)` decodes exactly as `tokenize.open` does (byte-order mark, coding cookie);
`cookie_finding` says when a file declares an encoding other than UTF-8; `fold(node)` is the text an
expression built from constant pieces always gives ("ex" + "ec"). Used by the integrity scan and the
suites' banned-use check (dojo.testing), so it stays in the base layer. It does not parse.
"""

from __future__ import annotations

import ast
import io
import re
import string
import tokenize
from collections.abc import Mapping
from pathlib import Path

PLAIN = ("utf-8", "utf-8-sig")  # what tokenize.detect_encoding names for no cookie, a UTF-8 cookie or a BOM


class Undecodable(ValueError):
    """The bytes are not Python source the interpreter would read: an unknown or contradictory coding
    cookie, or bytes invalid in the declared encoding. `line` is where (1-based; 1 when unknown)."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


def decode_python(data: bytes) -> tuple[str, str]:
    """(text, encoding) of source bytes, decoded as the interpreter does; the BOM is dropped.
    Raises Undecodable when the interpreter would refuse the bytes."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # unknown codec, BOM against cookie, or undecodable cookie line
        raise Undecodable(f"bad encoding declaration: {exc.msg}", exc.lineno or 1) from None
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise Undecodable(f"bytes invalid in its encoding {encoding}: {exc.reason}", line) from None
    except LookupError as exc:  # a codec tokenize accepts but that cannot decode bytes (none known)
        raise Undecodable(f"bad encoding declaration: {exc}") from None


def read_python(path: Path | str) -> tuple[str, str]:
    """(text, encoding) of the file at `path` as Python reads it. Raises OSError when it cannot be
    read, Undecodable when Python would refuse it."""
    return decode_python(Path(path).read_bytes())


def cookie_finding(encoding: str, text: str) -> tuple[int, str] | None:
    """(line, what) when the file declares an encoding other than UTF-8, else None. Any other cookie
    lets the bytes a reader sees differ from the code that runs (utf-7, unicode_escape)."""
    if encoding in PLAIN:
        return None
    lines = text.splitlines()[:2]
    line = next((i + 1 for i, t in enumerate(lines) if "coding" in t), 1)
    return (
        line,
        f"declares the source encoding {encoding!r} (PEP 263 cookie): the code that runs is not the text shown",
    )


def fold(node: ast.AST | None, consts: Mapping[str, ast.AST] | None = None, depth: int = 0) -> str | None:
    """The text `node` always evaluates to when it is built from string constants only ("ex" + "ec",
    f"{'gg'}uf", "".join(["a", "b"]), "%sec" % "ex", "{}ec".format("ex"), a name in `consts`, bound
    once to such an expression); else None."""
    if node is None or depth > 50:
        return None
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.Name) and consts and node.id in consts:
        return fold(consts[node.id], consts, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = fold(node.left, consts, depth + 1), fold(node.right, consts, depth + 1)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [
            fold(v.value if isinstance(v, ast.FormattedValue) else v, consts, depth + 1) for v in node.values
        ]
        return "".join(parts) if None not in parts else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) == 1
        and isinstance(node.args[0], (ast.List, ast.Tuple))
    ):
        sep, parts = (
            fold(node.func.value, consts, depth + 1),
            [fold(e, consts, depth + 1) for e in node.args[0].elts],
        )
        return sep.join(parts) if sep is not None and None not in parts else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "%sec" % "ex", "%s%s" % ("ex", "ec")
        template = fold(node.left, consts, depth + 1)
        items = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        parts = [fold(e, consts, depth + 1) for e in items]
        if template is None or None in parts or not PERCENT_S.fullmatch(template):
            return None  # only %s and %%: a width ("%999999999s") would build the string it names
        try:
            return template % tuple(parts)
        except (TypeError, ValueError):
            return None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and not any(isinstance(a, ast.Starred) for a in node.args)
        and all(k.arg for k in node.keywords)
    ):
        template = fold(node.func.value, consts, depth + 1)  # "{}{}".format("ex", "ec"), "{a}".format(a="ex")
        args = [fold(a, consts, depth + 1) for a in node.args]
        kwargs = {k.arg: fold(k.value, consts, depth + 1) for k in node.keywords}
        if template is None or None in args or None in kwargs.values() or not _plain_fields(template):
            return None
        try:
            return template.format(*args, **kwargs)
        except (IndexError, KeyError, ValueError):
            return None
    return None


PERCENT_S = re.compile(r"(?:[^%]|%%|%s)*", re.DOTALL)


def _plain_fields(template: str) -> bool:
    """Every replacement field of a str.format template is {}, {0} or {name}: no conversion, no format
    spec (a width would build the string it names), no attribute or index (they would run code)."""
    try:
        fields = [
            (name, spec, conv)
            for _, name, spec, conv in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError:
        return False
    return all(
        (name == "" or name.isdigit() or name.isidentifier()) and not spec and conv is None
        for name, spec, conv in fields
    )
