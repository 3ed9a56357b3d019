"""Similar submissions: copies survive renaming, comments and reformatting; unrelated code and the
stub everyone was given do not count; `dojo grade` reports both kinds in its JSON and summary."""

from __future__ import annotations

import ast
import builtins
import functools
import itertools
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


GRADED = [k.slug for k in catalog.load() if k.has_suite]


@functools.cache
def _reference(slug: str) -> tuple[str, str, similarity.Stream]:
    """The kata's reference, its stub and the reference's stream (made once for the file's tests)."""
    kata = catalog.get(slug)
    reference, stub = kata.reference.read_text(), kata.stub.read_text()
    return reference, stub, similarity.stream(reference, stub)


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


HONEST_MARGIN = 0.05  # how far under THRESHOLD the highest honest score must stay


def test_independent_solutions_are_not_flagged():
    """solutions written from the prompt alone (tests/dojo/honest/<slug>_<x>.py, two or three a kata, each
    passing its hidden suite in both modes) score under the threshold, with a margin, against the reference
    and against each other"""
    honest: dict[str, dict[str, str]] = {}
    for path in sorted(HONEST.glob("*_?.py")):
        honest.setdefault(path.stem.rsplit("_", 1)[0], {})[path.stem] = path.read_text()
    assert set(honest) == set(GRADED) and all(len(files) >= 2 for files in honest.values()), sorted(honest)
    scores = {}
    for slug, files in honest.items():
        _, stub, ref = _reference(slug)
        streams = {name: similarity.stream(source, stub) for name, source in files.items()} | {"ref": ref}
        for (a, sa), (b, sb) in itertools.combinations(sorted(streams.items()), 2):
            scores[a, b] = similarity.similarity(sa, sb)
    assert None not in scores.values(), [pair for pair, score in scores.items() if score is None]
    pair = max(scores, key=scores.get)
    assert scores[pair] < similarity.THRESHOLD - HONEST_MARGIN, (
        f"honest {pair[0]} and {pair[1]} score {scores[pair]:.3f}, within {HONEST_MARGIN} of the threshold"
    )


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


def _prepend(tree: ast.Module, code: str) -> ast.Module:
    """`code` put after the module's docstring and __future__ imports (what must come first)."""
    at = 0
    while at < len(tree.body) and _first(tree.body[at], at):
        at += 1
    tree.body[at:at] = ast.parse(code).body
    return tree


def _first(stmt: ast.stmt, index: int) -> bool:
    return (isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__") or (
        index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
    )


def via_getattr(source: str) -> str:
    """Rewrite a: every attribute read written `getattr(x, "name")`."""

    class Getattr(ast.NodeTransformer):
        def visit_Attribute(self, node):
            self.generic_visit(node)
            if isinstance(node.ctx, ast.Load):
                return ast.Call(ast.Name("getattr", ast.Load()), [node.value, ast.Constant(node.attr)], [])
            return node

    return ast.unparse(ast.fix_missing_locations(Getattr().visit(ast.parse(source))))


IDENTITIES = (  # pass-through functions, each returning its argument its own way
    "_i = lambda v: [v][0]",
    "_i = lambda v: (v,)[0]",
    "_i = lambda v: {0: v}[0]",
    "_i = lambda v: v if True else v",
    "_i = lambda v: (lambda: v)()",
    "def _i(v):\n    return [v][0]",
    "def _i(v):\n    return v",
)


def wrapped(source: str, identity: str, every: int) -> str:
    """Rewrite b: every `every`-th name read wrapped in the pass-through `identity` (annotations kept)."""

    class Wrap(ast.NodeTransformer):
        count = 0

        def visit_arg(self, node):
            return node

        def visit_AnnAssign(self, node):
            node.target, node.value = self.visit(node.target), node.value and self.visit(node.value)
            return node

        def visit_FunctionDef(self, node):
            node.args = self.visit(node.args)
            node.decorator_list = [self.visit(d) for d in node.decorator_list]
            node.body = [self.visit(s) for s in node.body]
            return node

        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Load):
                self.count += 1
                if self.count % every == 0:
                    return ast.Call(ast.Name("_i", ast.Load()), [node], [])
            return node

    tree = _prepend(Wrap().visit(ast.parse(source)), identity)
    return ast.unparse(ast.fix_missing_locations(tree))


def dead_statements(source: str) -> str:
    """Rewrite c: a dead `_pad = id(_pad_)` after every statement."""
    tree = ast.parse(source)
    for node in list(ast.walk(tree)):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                padded = []
                for i, stmt in enumerate(body):
                    head = node is tree and all(_first(s, n) for n, s in enumerate(body[: i + 1]))
                    padded += [stmt] + ([] if head else ast.parse("_pad = id(_pad_)").body)
                setattr(node, field, padded)
    return ast.unparse(ast.fix_missing_locations(_prepend(tree, "_pad_ = object()")))


def passes(source: str) -> str:
    """Rewrite d: `; pass` after every third simple statement, on its line."""
    text = ast.unparse(ast.parse(source))
    simple = [s for s in ast.walk(ast.parse(text)) if isinstance(s, ast.stmt) and not hasattr(s, "body")]
    lines = text.splitlines()
    for s in sorted(simple, key=lambda s: (s.lineno, s.col_offset))[2::3][::-1]:
        line = lines[s.end_lineno - 1]
        lines[s.end_lineno - 1] = line[: s.end_col_offset] + "; pass" + line[s.end_col_offset :]
    return "\n".join(lines) + "\n"


REWRITES = {
    "getattr": lambda source, n: via_getattr(source),
    "every_name_wrapped": lambda source, n: wrapped(source, IDENTITIES[n % len(IDENTITIES)], 1),
    "every_third_name_wrapped": lambda source, n: wrapped(source, IDENTITIES[n % len(IDENTITIES)], 3),
    "dead_statements": lambda source, n: dead_statements(source),
    "passes": lambda source, n: passes(source),
}


@pytest.mark.parametrize("slug", GRADED)
@pytest.mark.parametrize("rewrite", REWRITES)
def test_a_mechanical_rewrite_of_each_reference_is_flagged(rewrite, slug):
    """attributes read through getattr, names wrapped in a pass-through function, dead statements and
    `pass` leave no trace in the token stream: the copy is flagged as the reference itself is"""
    reference, stub, ref = _reference(slug)
    copy = REWRITES[rewrite](reference, GRADED.index(slug))
    compile(copy, slug, "exec")
    assert copy != reference
    mine = similarity.stream(copy, stub)
    score = similarity.similarity(mine, ref)
    assert score is not None and score >= similarity.THRESHOLD, (
        f"{slug}'s reference rewritten ({rewrite}) scores {score} against it, under {similarity.THRESHOLD}"
    )
    assert mine.tokens == ref.tokens, f"{slug}: the {rewrite} rewrite leaves a trace in the token stream"
