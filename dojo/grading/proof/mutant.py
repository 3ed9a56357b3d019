"""Mutants written as edits on the reference: a known bug in a few lines, not a copy of the file.

A mutant in tests/katas/mutants/<slug>/ is a module docstring (the bug in a candidate's terms: its
first line is quoted to interviewers) and `EDITS`, (old, new) string pairs applied in order to
solutions/<slug>.py, each `old` exactly once. A file without `EDITS` is a whole module, run as it is.

    python -m dojo.grading.proof.mutant tests/katas/mutants/bpe/strict_threshold.py   # the diff it makes
"""

from __future__ import annotations

import ast
import difflib
import sys
from pathlib import Path


def edits_of(mutant: Path) -> list[tuple[str, str]] | None:
    """The mutant's EDITS, read without running it; None for a whole-module mutant.

    Raises ValueError when EDITS is not a literal list of (old, new) string pairs."""
    tree = ast.parse(mutant.read_text(encoding="utf-8"), filename=str(mutant))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "EDITS" for t in node.targets
        ):
            try:
                edits = ast.literal_eval(node.value)
            except ValueError:
                raise ValueError(
                    f"{mutant.name}: EDITS must be a literal list of (old, new) strings"
                ) from None
            if (
                not isinstance(edits, list)
                or not edits
                or not all(
                    isinstance(e, tuple) and len(e) == 2 and all(isinstance(s, str) for s in e) for e in edits
                )
            ):
                raise ValueError(f"{mutant.name}: EDITS must be a non-empty list of (old, new) string pairs")
            return edits
    return None


def bug(mutant: Path) -> str:
    """The bug a mutant makes, in a candidate's terms: its docstring's first line ('' if none)."""
    try:
        doc = (ast.get_docstring(ast.parse(mutant.read_text(encoding="utf-8"))) or "").strip()
    except (OSError, SyntaxError, ValueError):
        return ""
    return doc.splitlines()[0].strip() if doc else ""


def apply(text: str, edits: list[tuple[str, str]], name: str = "mutant") -> str:
    """`text` with each edit applied in turn; ValueError unless each `old` occurs exactly once."""
    for n, (old, new) in enumerate(edits, 1):
        count = text.count(old)
        if count != 1:
            where = "no longer occurs in" if count == 0 else f"occurs {count} times in"
            first = old.strip().splitlines()[0] if old.strip() else repr(old)
            raise ValueError(f"{name}: edit {n} ({first[:70]!r}...) {where} the reference: update the mutant")
        if old == new:
            raise ValueError(f"{name}: edit {n} changes nothing")
        text = text.replace(old, new)
    return text


def materialize(mutant: Path, reference: Path, out_dir: Path) -> Path:
    """The module to run for `mutant`: the mutant itself if it is a whole module, else the
    reference with its edits, written to out_dir/<mutant's name> (rewritten only if changed).
    Raises ValueError for edits that do not apply."""
    edits = edits_of(mutant)
    if edits is None:
        return mutant
    header = f"# Written by dojo.grading.proof.mutant: {reference.name} with the edits of {mutant.name}. Do not edit.\n"
    text = header + apply(reference.read_text(encoding="utf-8"), edits, mutant.name)
    out = out_dir / mutant.name
    if not out.is_file() or out.read_text(encoding="utf-8") != text:
        out_dir.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    return out


def diff(mutant: Path, reference: Path) -> str:
    """A unified diff from the reference to the mutant (for reading a mutant)."""
    before = reference.read_text(encoding="utf-8")
    edits = edits_of(mutant)
    after = mutant.read_text(encoding="utf-8") if edits is None else apply(before, edits, mutant.name)
    return "".join(
        difflib.unified_diff(before.splitlines(True), after.splitlines(True), str(reference), str(mutant))
    )


def main(argv: list[str] | None = None) -> int:
    from dojo import catalog

    paths = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print(
            "usage: python -m dojo.grading.proof.mutant tests/katas/mutants/<slug>/<name>.py ...",
            file=sys.stderr,
        )
        return 2
    for path in paths:
        try:
            print(diff(path, catalog.get(path.parent.name).reference), end="")
        except (OSError, ValueError, catalog.UnknownKata) as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
