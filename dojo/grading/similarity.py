"""Similar submissions: which take-homes share their code for a kata, and which copy the reference.

The way MOSS works, reduced to what a grader of a few dozen submissions needs. Each file becomes a
token stream with its formatting, comments and names normalised away (every identifier that is not
a keyword is `N`, every string `S`, every number `0`; indentation, line breaks, parentheses and commas dropped: a formatter moves those), then the
set of hashes of every run of `SHINGLE` consecutive tokens. Shingles that the kata's stub has too are
removed (code everyone was given is not evidence, MOSS's "base file"). Two files are near-identical
when at least `THRESHOLD` of the smaller file's shingles are in the other, and it has at least
`MIN_SHINGLES` left to judge by.

Left out: MOSS's winnowing (it thins fingerprints for millions of files; here every shingle is kept),
and any judgement: a pair is evidence for a person to read, not a verdict.
"""

from __future__ import annotations

import hashlib
import io
import keyword
import tokenize
from itertools import combinations

SHINGLE = 12  # tokens per shingle: long enough that independent code rarely repeats one
THRESHOLD = 0.8  # share of the smaller file's shingles found in the other
MIN_SHINGLES = 20  # fewer than this left after the stub's are removed: too little code to judge
LOOSE = {"(", ")", ",", ";", "\\"}  # what a formatter adds or removes (grouping parentheses, trailing commas)
SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
           tokenize.ENCODING, tokenize.ENDMARKER}


def tokens(source: str) -> list[str]:
    """The normalised token stream of `source` (empty when it does not tokenize)."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in SKIPPED:
                continue
            if tok.type == tokenize.NAME:
                out.append(tok.string if keyword.iskeyword(tok.string) else "N")
            elif tok.type == tokenize.STRING or tok.type >= getattr(tokenize, "FSTRING_START", 1000):
                out.append("S")
            elif tok.type == tokenize.NUMBER:
                out.append("0")
            elif tok.string not in LOOSE:
                out.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return out


def shingles(source: str, base: frozenset[int] = frozenset()) -> frozenset[int]:
    """Hashes of every SHINGLE-token run in `source`, without those in `base` (the stub's)."""
    toks = tokens(source)
    runs = (" ".join(toks[i:i + SHINGLE]) for i in range(max(0, len(toks) - SHINGLE + 1)))
    return frozenset(int.from_bytes(hashlib.blake2b(r.encode(), digest_size=8).digest(), "big") for r in runs) - base


def similarity(a: frozenset[int], b: frozenset[int]) -> float | None:
    """Share of the smaller set found in the other; None when either has too few shingles to judge."""
    if min(len(a), len(b)) < MIN_SHINGLES:
        return None
    return len(a & b) / min(len(a), len(b))


def find(files: dict[str, dict[str, str]], references: dict[str, str], stubs: dict[str, str]) -> dict:
    """Near-identical code among submissions. `files`: {kata: {submission: source}}; `references` and
    `stubs`: {kata: source}. Returns {"threshold", "shingle", "pairs": [{"kata", "a", "b",
    "similarity"}], "reference": [{"kata", "submission", "similarity"}]}, highest first."""
    pairs, copies = [], []
    for kata, by_submission in files.items():
        base = shingles(stubs.get(kata, ""))
        prints = {name: shingles(src, base) for name, src in by_submission.items()}
        for (a, fa), (b, fb) in combinations(sorted(prints.items()), 2):
            score = similarity(fa, fb)
            if score is not None and score >= THRESHOLD:
                pairs.append({"kata": kata, "a": a, "b": b, "similarity": round(score, 3)})
        if kata in references:
            reference = shingles(references[kata], base)
            for name, fp in sorted(prints.items()):
                score = similarity(fp, reference)
                if score is not None and score >= THRESHOLD:
                    copies.append({"kata": kata, "submission": name, "similarity": round(score, 3)})
    key = lambda row: -row["similarity"]  # noqa: E731
    return {"threshold": THRESHOLD, "shingle": SHINGLE, "pairs": sorted(pairs, key=key),
            "reference": sorted(copies, key=key)}
