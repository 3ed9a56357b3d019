"""The question bank and the interviewer's packet: what an interviewer asks and listens for.

katas/BANK.md holds interview questions that stand outside any one kata, in the QUESTIONS.md
format plus a "Topic: ..." line under each heading. `bank()` parses it; `pick(topic)` filters it;
`packet(kata)` assembles everything a human interviewer needs for a two-person mock interview:
the prompt, the expected approach (the reference's module docstring), the hints and when to give
them, the follow-ups with model answers and rubric, and the common mistakes (the first docstring
line of each of the kata's mutants). Nothing here prints or asks.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from dojo import catalog, targets
from dojo.grading import mutant
from dojo.catalog import Kata, Question


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
    """Bank entries whose topic (or, failing that, question text) contains `topic`; all when None.
    Raises ValueError naming the topics when nothing matches."""
    entries = bank()
    if not entries:
        raise FileNotFoundError(f"no question bank at {bank_path()}")
    if topic is None:
        return entries
    needle = topic.lower()
    found = [q for q in entries if needle in q.topic.lower()] or [q for q in entries if needle in q.question.question.lower()]
    if not found:
        raise ValueError(f"no bank question on {topic!r}: topics are {', '.join(topics())}")
    return found


def for_kata(kata: Kata) -> BankQuestion | None:
    """The bank question closest to `kata`, the first entry that matches in this order: its topic is
    one of the kata's tags or its slug; the question names the slug; a topic word is a tag; the
    question names a tag. Else the first entry (None when the bank is empty)."""
    entries = bank()
    slug, tags = _plain(kata.slug), {_plain(t) for t in kata.tags}
    tests = (
        lambda q: _plain(q.topic) in tags | {slug},
        lambda q: slug in _plain(q.question.question),
        lambda q: bool(set(_plain(q.topic).split()) & tags),
        lambda q: any(t in _plain(q.question.question) for t in tags),
    )
    for matches in tests:
        for q in entries:
            if matches(q):
                return q
    return entries[0] if entries else None


def _plain(text: str) -> str:
    return re.sub(r"[-_]", " ", text.lower())


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
        kata=kata, prompt=kata.readme(), approach=approach or "(the reference has no module docstring)",
        hints=list(zip(when, hints)), questions=kata.questions() + ([extra.question] if extra else []),
        mistakes=[(name, line) for name, line in mistakes if line],
    )
