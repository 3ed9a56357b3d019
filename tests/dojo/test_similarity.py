"""Similar submissions: copies survive renaming, comments and reformatting; unrelated code and the
stub everyone was given do not count; `dojo grade` reports both kinds in its JSON and summary."""

from __future__ import annotations

import ast
import builtins
import json
import re
from pathlib import Path

import pytest

from dojo import catalog
from dojo.grading.scan import similarity


def disguise(source: str) -> str:
    """The copier's edits: reformatted (ast.unparse drops comments and changes layout), names changed."""
    text = ast.unparse(ast.parse(source))
    return re.sub(r"\bself\b", "me", re.sub(r"\bmerges\b", "joins", text)) + "\n# my own work\n"


def test_a_disguised_copy_of_the_reference_is_near_identical():
    """the bpe reference reformatted and renamed is still found, above the threshold"""
    kata = catalog.get("bpe")
    stub = kata.stub.read_text()
    ref = similarity.stream(kata.reference.read_text(), stub)
    copy = similarity.stream(disguise(kata.reference.read_text()), stub)
    assert similarity.similarity(ref, copy) >= 0.95


def test_unrelated_code_and_the_stub_are_not():
    """different katas' references score far below the threshold; the stub alone is too little to judge"""
    refs = {k.slug: similarity.stream(k.reference.read_text()) for k in catalog.load() if k.has_suite}
    for a, b in [("latency", "batching"), ("generate", "kv_cache"), ("roofline", "latency")]:
        assert similarity.similarity(refs[a], refs[b]) < similarity.THRESHOLD / 2
    for kata in (k for k in catalog.load() if k.has_suite):
        stub = kata.stub.read_text()
        assert (
            similarity.similarity(
                similarity.stream(stub, stub), similarity.stream(kata.reference.read_text(), stub)
            )
            is None
        )


def pad(source: str) -> str:
    """A copier's padding: `pass` after every third statement, a dead assignment after every second,
    top-level functions in reverse order, every local name renamed."""
    tree = ast.parse(source)
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    local = (
        {
            n.id
            for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef)
            for n in ast.walk(f)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        - top
        - set(dir(builtins))
    )
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in local:
            n.id = f"my_{n.id}"
    count = iter(range(10**6))
    for node in list(ast.walk(tree)):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                padded = []
                for i, stmt in enumerate(body, 1):
                    padded += [stmt] + ([ast.Pass()] if i % 3 == 0 else [])
                    padded += ast.parse(f"unused_{next(count)} = len(str({i}))").body if i % 2 == 0 else []
                setattr(node, field, padded)
    where = [i for i, n in enumerate(tree.body) if isinstance(n, ast.FunctionDef)]
    for i, n in zip(where, [tree.body[i] for i in where][::-1]):
        tree.body[i] = n
    return ast.unparse(ast.fix_missing_locations(tree))


@pytest.mark.parametrize("slug", [k.slug for k in catalog.load() if k.has_suite])
def test_a_padded_copy_of_each_reference_is_flagged(slug):
    """pass statements, dead assignments, reordered functions and renamed locals do not hide a copy"""
    kata = catalog.get(slug)
    reference, stub = kata.reference.read_text(), kata.stub.read_text()
    copy = pad(reference)
    assert copy != reference and "pass" in copy and "unused_" in copy
    doc = similarity.find({slug: {"copy": copy}}, {slug: reference}, {slug: stub})
    assert [c["submission"] for c in doc["reference"]] == ["copy"], doc


HONEST = Path(__file__).parent / "honest"


def test_independent_solutions_are_not_flagged():
    """solutions written from the prompt alone (tests/dojo/honest/<slug>_<x>.py, two or three a kata, each
    passing its hidden suite in both modes) are flagged neither against the reference nor against each other"""
    honest: dict[str, dict[str, str]] = {}
    for path in sorted(HONEST.glob("*_?.py")):
        honest.setdefault(path.stem.rsplit("_", 1)[0], {})[path.stem] = path.read_text()
    graded = {k.slug for k in catalog.load() if k.has_suite}
    assert set(honest) == graded and all(len(files) >= 2 for files in honest.values()), sorted(honest)
    for slug, files in honest.items():
        kata = catalog.get(slug)
        doc = similarity.find(
            {slug: {**files, "ref": kata.reference.read_text()}},
            {slug: kata.reference.read_text()},
            {slug: kata.stub.read_text()},
        )
        assert [c["submission"] for c in doc["reference"]] == ["ref"], (
            slug,
            doc,
        )  # only the reference itself
        assert not [p for p in doc["pairs"] if "ref" not in (p["a"], p["b"])], (slug, doc["pairs"])


LONG = """
def add(a, b):
    total = a
    for _ in range(abs(b)):
        total = total + 1 if b > 0 else total - 1
    return total


def count_words(text):
    counts = {}
    word = ""
    for ch in text + " ":
        if ch.isspace():
            if word:
                counts[word] = counts.get(word, 0) + 1
            word = ""
        else:
            word += ch
    return counts
"""


OWN = """
from collections import Counter


def add(a: int, b: int) -> int:
    return sum([a, b])


def count_words(text: str) -> dict[str, int]:
    return dict(Counter(text.split()))
"""

REFERENCE = """
def add(a: int, b: int) -> int:
    if not isinstance(a, int) or not isinstance(b, int):
        raise TypeError(f"add wants two ints, got {type(a).__name__} and {type(b).__name__}")
    return a + b


def count_words(text: str) -> dict[str, int]:
    if not isinstance(text, str):
        raise TypeError("count_words wants a string")
    counts: dict[str, int] = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts
"""


def test_grade_reports_pairs_and_reference_copies(dojo, tmp_path):
    """dojo grade A B C D: A and B near-identical (B renamed A), D copies the reference, C is its own"""
    folders = {n: tmp_path / n for n in "ABCD"}
    for folder in folders.values():
        folder.mkdir()
    (folders["A"] / "toy.py").write_text(LONG)
    (folders["B"] / "toy.py").write_text(
        re.sub(r"\bcounts\b", "tally", re.sub(r"\bword\b", "w", LONG)) + "# B\n"
    )
    (folders["C"] / "toy.py").write_text(OWN)
    (dojo.toy / "solutions" / "toy.py").write_text(REFERENCE)
    (folders["D"] / "toy.py").write_text(disguise(REFERENCE))
    out = dojo("grade", *map(str, folders.values()), "--json", str(tmp_path / "r.json"))
    doc = json.loads((tmp_path / "r.json").read_text())
    pairs = {(p["a"], p["b"]) for p in doc["similar"]["pairs"]}
    assert pairs == {(str(folders["A"]), str(folders["B"]))}, pairs
    assert [c["submission"] for c in doc["similar"]["reference"]] == [str(folders["D"])]
    assert "near-identical" in out.stdout and doc["similar"]["threshold"] == similarity.THRESHOLD
    assert all(s["sandboxed"] in (True, False) and "integrity" in s for s in doc["submissions"])


def test_names_wrapped_in_a_pass_through_function_do_not_hide_a_copy():
    """the reference with every other name read through `def _i(v): return v` is still near-identical"""
    import ast

    class Wrap(ast.NodeTransformer):
        count = 0

        def visit_Name(self, node):
            self.count += 1
            if isinstance(node.ctx, ast.Load) and self.count % 2:
                return ast.Call(ast.Name("_i", ast.Load()), [node], [])
            return node

    for slug in ("kv_cache", "attention", "bpe"):
        kata = catalog.get(slug)
        tree = Wrap().visit(ast.parse(kata.reference.read_text()))
        wrapped = "def _i(v):\n    return v\n\n" + ast.unparse(ast.fix_missing_locations(tree))
        stub = kata.stub.read_text()
        score = similarity.similarity(
            similarity.stream(wrapped, stub), similarity.stream(kata.reference.read_text(), stub)
        )
        assert score is not None and score >= similarity.THRESHOLD, (slug, score)
