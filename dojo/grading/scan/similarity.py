"""Similar submissions: which take-homes share their code for a kata, and which copy the reference.

Greedy String Tiling, as JPlag compares programs: each file becomes a token stream with what a copier
changes for free normalised away (its mechanical rewrites undone by `canonical`, then layout, comments,
names, constants, statements that do nothing), and two streams are covered by their longest common runs first (`MIN_MATCH` tokens at least). Tokens
the kata's stub accounts for count for neither side. `find` lists the pairs, and the copies of the
reference, at `THRESHOLD` or more: evidence for a person to read, not a verdict.
"""

from __future__ import annotations

import builtins
import io
import keyword
import tokenize
from dataclasses import dataclass
from itertools import combinations

from dojo.grading.scan import canonical

MIN_MATCH = 10  # shortest tile, in tokens: shorter runs recur in independent code
THRESHOLD = 0.75  # share of the shorter stream covered by tiles
MIN_TOKENS = 40  # fewer than this left after the stub's are removed: too little code to judge
BUILTIN = frozenset(dir(builtins))
LOOSE = {"(", ")", ",", ";", "\\"}  # what a formatter adds or removes (grouping parentheses, trailing commas)
LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
CONSTANT = {"0", "S", "None", "True", "False", "+", "-", "*", "/", "//", "%", "**", "[", "]", "{", "}", ":"}
NO_OP = {("pass",), ("...",), ("S",), ("0",), ("N",), ("None",), ("True",), ("False",)}  # whole statements


@dataclass(frozen=True)
class Stream:
    """A file's normalised tokens, and the positions its stub accounts for (they count for no side)."""

    tokens: tuple[str, ...]
    base: frozenset[int] = frozenset()

    def __len__(self) -> int:
        return len(self.tokens) - len(self.base)


def tokens(source: str) -> list[str]:
    """The normalised token stream of `source`, its mechanical rewrites undone first (`canonical`);
    empty when it does not tokenize."""
    out: list[str] = []
    statement: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(canonical.source(source)).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if not _no_op(statement):
                    out += statement
                statement = []
            elif tok.type not in LAYOUT:
                statement += _normal(tok, statement[-1] if statement else "")
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return out


def _no_op(statement: list[str]) -> bool:
    """A statement that carries no evidence: `pass`, a docstring or bare constant, or a constant bound to a
    plain name (`unused = 3 * 2`, the cheapest padding; honest initialisations lose little by it)."""
    if not statement or tuple(statement) in NO_OP or set(statement) == {"S"}:
        return True
    return statement[:2] == ["N", "="] and all(t in CONSTANT for t in statement[2:])


def _normal(tok: tokenize.TokenInfo, before: str) -> list[str]:
    if tok.type == tokenize.NAME:  # keywords, builtins and attribute names stay: a copier renames locals
        return [
            tok.string if keyword.iskeyword(tok.string) or tok.string in BUILTIN or before == "." else "N"
        ]
    if tok.type == tokenize.STRING or tok.type >= getattr(tokenize, "FSTRING_START", 1000):
        return ["S"]
    if tok.type == tokenize.NUMBER:
        return ["0"]
    return [] if tok.string in LOOSE else [tok.string]


def stream(source: str, stub: str = "") -> Stream:
    """`source` as a Stream, the tokens it shares with `stub` (tiled against it) marked as base."""
    toks = tuple(tokens(source))
    if not stub:
        return Stream(toks)
    base, _ = _tile(toks, tuple(tokens(stub)), set(), set())
    return Stream(toks, frozenset(base))


def similarity(a: Stream, b: Stream) -> float | None:
    """Share of the shorter stream covered by tiles; None when either has too little code to judge."""
    if min(len(a), len(b)) < MIN_TOKENS:
        return None
    covered, _ = _tile(a.tokens, b.tokens, set(a.base), set(b.base))
    return (len(covered) - len(a.base)) / min(len(a), len(b))


def _tile(
    a: tuple[str, ...], b: tuple[str, ...], marked_a: set[int], marked_b: set[int]
) -> tuple[set[int], set[int]]:
    """Greedy String Tiling: mark the longest common unmarked runs first, down to MIN_MATCH tokens.
    Returns the marked positions of a and of b (the given marks included)."""
    starts: dict[tuple[str, ...], list[int]] = {}
    for j in range(len(b) - MIN_MATCH + 1):
        starts.setdefault(b[j : j + MIN_MATCH], []).append(j)
    while True:
        longest, matches = MIN_MATCH, []
        for i in range(len(a) - MIN_MATCH + 1):
            if i in marked_a:
                continue
            for j in starts.get(a[i : i + MIN_MATCH], ()):
                k = 0
                while (
                    i + k < len(a)
                    and j + k < len(b)
                    and a[i + k] == b[j + k]
                    and i + k not in marked_a
                    and j + k not in marked_b
                ):
                    k += 1
                if k > longest:
                    longest, matches = k, [(i, j, k)]
                elif k == longest:
                    matches.append((i, j, k))
        for i, j, k in matches:
            if not any(i + n in marked_a or j + n in marked_b for n in range(k)):
                marked_a.update(range(i, i + k))
                marked_b.update(range(j, j + k))
        if longest == MIN_MATCH:
            return marked_a, marked_b


def find(files: dict[str, dict[str, str]], references: dict[str, str], stubs: dict[str, str]) -> dict:
    """Near-identical code among submissions. `files`: {kata: {submission: source}}; `references` and
    `stubs`: {kata: source}. Returns {"threshold", "min_match", "pairs": [{"kata", "a", "b",
    "similarity"}], "reference": [{"kata", "submission", "similarity"}]}, highest first."""
    pairs, copies = [], []
    for kata, by_submission in files.items():
        stub = stubs.get(kata, "")
        streams = {name: stream(src, stub) for name, src in by_submission.items()}
        for (a, sa), (b, sb) in combinations(sorted(streams.items()), 2):
            score = similarity(sa, sb)
            if score is not None and score >= THRESHOLD:
                pairs.append({"kata": kata, "a": a, "b": b, "similarity": round(score, 3)})
        if kata in references:
            reference = stream(references[kata], stub)
            for name, s in sorted(streams.items()):
                score = similarity(s, reference)
                if score is not None and score >= THRESHOLD:
                    copies.append({"kata": kata, "submission": name, "similarity": round(score, 3)})
    key = lambda row: -row["similarity"]  # noqa: E731
    return {
        "threshold": THRESHOLD,
        "min_match": MIN_MATCH,
        "pairs": sorted(pairs, key=key),
        "reference": sorted(copies, key=key),
    }
