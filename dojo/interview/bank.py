"""The question bank and the interviewer's packet: what an interviewer asks and listens for.

`bank()` parses katas/BANK.md (QUESTIONS.md's format plus a "Topic: ..." line); `pick(topic)` filters
it; `for_kata(kata)` is the interview's extra follow-up, the closest entry that does not repeat the
kata (`repeats`). `packet(kata)` is everything a human interviewer needs for a two-person mock
interview. Nothing here prints or asks.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from dojo import catalog, targets
from dojo.catalog import Kata, Question
from dojo.grading.proof import mutant


@dataclass(frozen=True)
class BankQuestion:
    topic: str
    question: Question


def bank_path() -> Path:
    return targets.katas_dir() / "BANK.md"


def bank() -> list[BankQuestion]:
    """Every entry of BANK.md in file order (empty when the file is absent)."""
    path = bank_path()
    if not path.is_file():
        return []
    found = []
    for block in re.split(r"(?m)^(?=##\s+Q:)", path.read_text()):
        topic = re.search(r"(?m)^Topic:\s*(.+?)\s*$", block)
        questions = catalog.parse_questions(re.sub(r"(?m)^Topic:.*\n?", "", block))
        if questions:
            found.append(BankQuestion(topic.group(1) if topic else "general", questions[0]))
    return found


def topics() -> list[str]:
    return sorted({q.topic for q in bank()})


def pick(topic: str | None = None) -> list[BankQuestion]:
    """Bank entries on `topic`: for a kata slug, the entries closest to that kata (`closest`); else those
    whose topic (or, failing that, question text) contains it, '-' and '_' alike; all when None.
    Raises FileNotFoundError without a bank, ValueError naming the topics when nothing matches."""
    entries = bank()
    if not entries:
        raise FileNotFoundError(f"no question bank at {bank_path()}")
    if topic is None:
        return entries
    kata = next((k for k in catalog.load() if k.slug == topic), None)
    if kata is not None:
        return closest(kata)
    needle = _plain(topic)
    found = [q for q in entries if needle in _plain(q.topic)] or [
        q for q in entries if needle in _plain(q.question.question)
    ]
    if not found:
        raise ValueError(f"no bank question on {topic!r}: topics are {', '.join(topics())}, or a kata's slug")
    return found


def closest(kata: Kata) -> list[BankQuestion]:
    """Every bank entry, closest to `kata` first: its topic is the kata's slug; one of its tags; a topic
    word is a tag; a topic word is a tag of a related kata (a prerequisite, a kata building on it, one
    sharing a tag); the question names the slug; the question names a tag; then the rest in file order."""
    entries = bank()
    slug, tags = _plain(kata.slug), {_plain(t) for t in kata.tags}
    related = {
        _plain(t)
        for k in catalog.load()
        if k.slug != kata.slug
        and (
            k.slug in kata.prerequisites or kata.slug in k.prerequisites or tags & {_plain(t) for t in k.tags}
        )
        for t in k.tags
    }
    related = {word for t in related for word in t.split()}
    tests = (
        lambda q: _plain(q.topic) == slug,
        lambda q: _plain(q.topic) in tags,
        lambda q: bool(set(_plain(q.topic).split()) & tags),
        lambda q: bool(set(_plain(q.topic).split()) & related),
        lambda q: _names(q.question.question, slug),
        lambda q: any(_names(q.question.question, t) for t in tags),
        lambda q: True,
    )
    return sorted(
        entries, key=lambda q: next(i for i, matches in enumerate(tests) if matches(q))
    )  # stable: file order


def for_kata(kata: Kata) -> BankQuestion | None:
    """The interview's extra follow-up for `kata`: the closest bank entry that does not repeat the kata
    (None when every entry does, or the bank is empty)."""
    return next((q for q in closest(kata) if repeats(q.question, kata) is None), None)


SIMILAR = 0.6  # word-sequence similarity at which two texts count as the same question or point


def similarity(a: str, b: str) -> float:
    """How alike two texts read, 0..1: difflib's ratio over their lower-cased words (punctuation and
    Markdown ignored)."""
    return difflib.SequenceMatcher(None, _words(a), _words(b), autojunk=False).ratio()


def repeats(question: Question, kata: Kata) -> str | None:
    """What of `kata` the follow-up `question` repeats: its opening prompt, one of its questions, or a
    rubric point of theirs (that text), or None when it repeats nothing."""
    asked = [opening_prompt(kata)] + [q.question for q in kata.questions()]
    points = [r for q in kata.questions() for r in q.rubric]
    for text in asked:
        if text and similarity(question.question, text) >= SIMILAR:
            return text
    for mine in question.rubric:
        for text in points:
            if similarity(mine, text) >= SIMILAR:
                return text
    return None


def opening_prompt(kata: Kata) -> str:
    """The question a kata's README opens with: its first blockquote ('' when it has none)."""
    found = re.search(r"(?m)^>.*(?:\n>.*)*", kata.readme())
    return re.sub(r"(?m)^>\s?", "", found.group(0)).strip() if found else ""


def _plain(text: str) -> str:
    return re.sub(r"[-_]", " ", text.lower())


def _names(text: str, term: str) -> bool:
    """Whether `text` contains `term` as whole words ('int4' is not named by 'int48')."""
    return re.search(rf"\b{re.escape(term)}\b", _plain(text)) is not None


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def module_docstring(path: Path) -> str:
    """A Python file's module docstring ('' when it has none or does not parse)."""
    try:
        return (ast.get_docstring(ast.parse(path.read_text())) or "").strip()
    except (SyntaxError, OSError, ValueError):
        return ""


@dataclass(frozen=True)
class Packet:
    kata: Kata
    prompt: str
    approach: str
    hints: list[tuple[int, str]]  # (minute to offer it if the candidate is stuck, text)
    questions: list[Question]  # the kata's follow-ups, then the bank's closest entry
    mistakes: list[tuple[str, str]]  # (mutant name, the common mistake it makes)


def packet(kata: Kata) -> Packet:
    """Everything an interviewer needs for `kata`. Hints are spread over the session's first 80%:
    hint i of n is offered at minute round(0.8 * minutes * i / (n + 1)) if the candidate is stuck."""
    hints = kata.hints()
    when = [round(0.8 * kata.minutes * i / (len(hints) + 1)) for i in range(1, len(hints) + 1)]
    approach = module_docstring(kata.reference) if kata.reference.is_file() else ""
    extra = for_kata(kata)
    mistakes = [(p.stem, mutant.bug(p)) for p in kata.mutants]
    return Packet(
        kata=kata,
        prompt=kata.readme(),
        approach=approach or "(the reference has no module docstring)",
        hints=list(zip(when, hints)),
        questions=kata.questions() + ([extra.question] if extra else []),
        mistakes=[(name, line) for name, line in mistakes if line],
    )
