"""Evidence for a self-marked rubric point: the point's key terms and numbers, looked for in an answer.

`terms(point)` reads them off the rubric line itself: its words less stop words and rubric verbs, the
spelled-out forms of its acronyms (SYNONYMS), and its numbers with their units. `found(point, answer)`
is the terms the answer contains, matched case-, punctuation- and inflection-insensitively ("KV cache"
is "kv-cache", "merges" is "merging") and numbers as numbers ("46 080" is "46,080", "0.5 MiB" is
"512 KiB", "4k" is 4096). Plain rules, deterministic: no network, no model. Evidence, not a verdict:
an answer that names a point's terms may still get it wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STOP = set(
    "a about above after again against all also an and any are as at be because been before being below"
    " between both but by can could did do does doing down during e each eg either else etc even every"
    " for from further g had has have having here how i ie if in into is it its itself just less like"
    " many may more most much must my no nor not of off often on once one only or other our out over own"
    " per rather same should since so some such than that the their them then there these they this"
    " those through to too two under until up upon us very vs was way we well were what when where"
    " whether which while who whom why will with within without would yet you your"
    # rubric verbs, praise and vague words: how a point is phrased, not what it is about
    " argues connects correct correctly describes distinguishes explains far gets gives identifies knows"
    " least links mentions names notes plus points puts quotes real recognises recognizes right says"
    " shows states suggests uses works writes".split()
)
# spellings of one idea: a point that holds any form gets them all as terms
SYNONYMS = (
    ("kv", "key value", "keys and values"),
    ("kv cache", "kvcache"),
    ("gqa", "grouped query"),
    ("mqa", "multi query"),
    ("mha", "multi head"),
    ("mla", "latent attention"),
    ("ttft", "time to first token"),
    ("tpot", "time per output token"),
    ("tp", "tensor parallel", "tensor parallelism"),
    ("bw", "bandwidth"),
    ("fp32", "float32", "single precision"),
    ("fp16", "float16", "half precision"),
    ("bf16", "bfloat16"),
    ("int8", "8 bit"),
    ("int4", "4 bit"),
    ("prefill", "pre fill"),
    ("bpe", "byte pair"),
    ("rope", "rotary"),
)
# a number, its thousands grouped by a comma or a (thin) space, then an optional unit
NUMBER = re.compile(
    r"(?<![\w.])(\d{1,3}(?:(?:,|[ \u00a0\u2009\u202f])\d{3})+(?!\d)|\d+(?:\.\d+)?)"
    r"(?:\s?([kmgt]i?b|bytes?|b|k|m|x|%)(?![a-z]))?",
    re.IGNORECASE,
)
SCALES = {"k": (1e3, 1024), "m": (1e6,), "b": (1,), "byte": (1,), "bytes": (1,)}
SCALES |= {f"{p}b": (1e3**i,) for i, p in enumerate("kmgt", start=1)}
SCALES |= {f"{p}ib": (1024**i,) for i, p in enumerate("kmgt", start=1)}
TOLERANCE = 0.01  # relative: numbers this close are the same ("524 KB" is 0.5 MiB)
SUFFIXES = ("ations", "ation", "ings", "ing", "ions", "ion", "es", "ed", "s", "e", "ly")
IRREGULAR = {"kept": "keep"}


@dataclass(frozen=True)
class Term:
    text: str  # as shown to a reader: "punctuation", "46 080 B", "time to first token"
    stems: tuple[str, ...] = ()  # a word or phrase, stemmed
    values: tuple[float, ...] = ()  # a number: its numeral, then (with a unit) its sizes in base units


def terms(point: str) -> list[Term]:
    """The evidence terms of rubric line `point`: its numbers, key words, and their synonyms, in order."""
    found: dict[tuple, Term] = {}
    text = _plain(point)
    for m in NUMBER.finditer(text):
        values = _values(m)
        found.setdefault(values, Term(" ".join(m.group(0).split()), values=values))
    words = _words(NUMBER.sub(" ", text))
    for word in words:
        if word.lower() not in STOP and len(word) > 1 and not word[0].isdigit():
            found.setdefault((_stem(word),), Term(word, (_stem(word),)))
    stems = [_stem(w) for w in words]
    for group in SYNONYMS:
        forms = [tuple(_stem(w) for w in _words(f)) for f in group]
        if any(_contains(stems, form) for form in forms):
            for shown, form in zip(group, forms):
                found.setdefault(form, Term(shown, form))
    return list(found.values())


def found(point: str, answer: str, question: str = "") -> list[str]:
    """The terms of `point` that `answer` contains (their text, in `terms` order; none for a blank answer).
    A term the `question` itself holds is no evidence, as an answer can echo it ("the GPU is purple"),
    unless the point has no other term."""
    asked, held = _holds(question), _holds(answer)
    own = [t for t in terms(point) if not asked(t)] or terms(point)
    return [t.text for t in own if held(t)]


def _holds(text: str):
    """A test of whether plain `text` contains a Term (its number, or its stemmed word or phrase)."""
    text = _plain(text)
    numbers = [_values(m) for m in NUMBER.finditer(text)]
    stems = [_stem(w) for w in _words(NUMBER.sub(" ", text))]
    return lambda t: bool(
        (t.values and any(_same(t.values, n) for n in numbers)) or (t.stems and _contains(stems, t.stems))
    )


def _plain(text: str) -> str:
    """`text` without Markdown emphasis and code marks ('_' stays: 'Q4_1' holds no number 1)."""
    return re.sub(r"[`*]", " ", text)


def _words(text: str) -> list[str]:
    """The words of plain `text`, split at punctuation and '_' ('kv-cache', 'kv_cache': kv, cache)."""
    return re.findall(r"[A-Za-z0-9]+", text)


def _values(m: re.Match) -> tuple[float, ...]:
    """A NUMBER match's numeral, then its sizes in base units ('4k': 4, 4000, 4096)."""
    numeral = float(re.sub(r"[^\d.]", "", m.group(1)))
    unit = (m.group(2) or "").lower()
    return (numeral, *(numeral * s for s in SCALES.get(unit, ())))


def _same(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """Two numbers (`_values`) are one: a value in common, or two sizes within TOLERANCE (524 KB, 0.5 MiB)."""
    near = any(abs(x - y) <= TOLERANCE * max(x, y) for x in a[1:] for y in b[1:])
    return near or bool(set(a) & set(b))


def _contains(stems: list[str], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return any(tuple(stems[i : i + n]) == phrase for i in range(len(stems) - n + 1))


def _stem(word: str) -> str:
    """A crude stem, the same for a word's usual inflections: merge, merges, merged, merging -> merg;
    British -ise spellings as -ize (quantise, quantisation -> quantiz)."""
    word = word.lower()
    word = IRREGULAR.get(word, word)
    word = re.sub(r"is(e|es|ed|ing|ation|ations)$", r"iz\1", word)
    word = re.sub(r"(?<=...)ie[sd]$", "y", word)  # copies, copied -> copy
    for _ in range(2):  # partitioned -> partition -> partit
        for suffix in SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
                word = word[: -len(suffix)]
                break
        else:
            break
    return word
