"""Similar submissions: copies survive renaming, comments and reformatting; unrelated code and the
stub everyone was given do not count; `dojo grade` reports both kinds in its JSON and summary."""

from __future__ import annotations

import ast
import json
import re

from dojo import catalog
from dojo.grading import similarity


def disguise(source: str) -> str:
    """The copier's edits: reformatted (ast.unparse drops comments and changes layout), names changed."""
    text = ast.unparse(ast.parse(source))
    return re.sub(r"\bself\b", "me", re.sub(r"\bmerges\b", "joins", text)) + "\n# my own work\n"


def test_a_disguised_copy_of_the_reference_is_near_identical():
    """the bpe reference reformatted and renamed is still found, above the threshold"""
    kata = catalog.get("bpe")
    base = similarity.shingles(kata.stub.read_text())
    ref = similarity.shingles(kata.reference.read_text(), base)
    copy = similarity.shingles(disguise(kata.reference.read_text()), base)
    assert similarity.similarity(ref, copy) >= 0.95


def test_unrelated_code_and_the_stub_are_not():
    """different katas' references score far below the threshold; the stub alone is too little to judge"""
    refs = {k.slug: similarity.shingles(k.reference.read_text()) for k in catalog.load() if k.has_suite}
    for a, b in [("latency", "batching"), ("generate", "kv_cache"), ("roofline", "latency")]:
        assert similarity.similarity(refs[a], refs[b]) < similarity.THRESHOLD / 2
    stub = catalog.get("bpe").stub.read_text()
    assert similarity.similarity(similarity.shingles(stub, similarity.shingles(stub)), refs["bpe"]) is None


LONG = '''
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
'''


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
    (folders["B"] / "toy.py").write_text(re.sub(r"\bcounts\b", "tally", re.sub(r"\bword\b", "w", LONG)) + "# B\n")
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
