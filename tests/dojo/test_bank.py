"""The question bank against the real katas: an interview's follow-ups never repeat the kata, and
`dojo ask` takes every kata's slug.

The oracle for "repeats" is written plainly here: two texts are the same question when difflib's
ratio over their lower-cased words reaches 0.6 (reworded copies score 0.65-1.0 on this bank; distinct
questions and points at most about 0.5).
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys

import pytest

from dojo import catalog
from dojo.interview import bank, evidence, session

KATAS = [k for k in catalog.load() if k.questions()]


def same(a: str, b: str) -> bool:
    words = lambda text: re.findall(r"[a-z0-9]+", text.lower())  # noqa: E731
    return difflib.SequenceMatcher(None, words(a), words(b), autojunk=False).ratio() >= 0.6


def opening(kata) -> str:
    quote = re.search(r"(?m)^>.*(?:\n>.*)*", kata.readme())
    return re.sub(r"(?m)^>\s?", "", quote.group(0)) if quote else ""


@pytest.mark.parametrize("kata", KATAS, ids=lambda k: k.slug)
def test_bank_follow_up_repeats_nothing_of_its_kata(kata):
    """the bank question an interview adds is not the kata's opening prompt, nor one of its
    QUESTIONS.md, and none of its rubric points is one of theirs"""
    extra = bank.for_kata(kata)
    assert extra is not None
    own = kata.questions()
    for text in [opening(kata)] + [q.question for q in own]:
        assert not same(extra.question.question, text), f"{kata.slug}: bank follow-up repeats {text!r}"
    for point in extra.question.rubric:
        for theirs in (r for q in own for r in q.rubric):
            assert not same(point, theirs), f"{kata.slug}: rubric point {point!r} repeats {theirs!r}"


@pytest.mark.parametrize("kata", KATAS, ids=lambda k: k.slug)
def test_kata_follow_ups_are_distinct(kata):
    """the follow-ups one interview asks are different questions from each other"""
    asked = [q.question for q in kata.questions()[: session.KATA_QUESTIONS]] + [
        bank.for_kata(kata).question.question
    ]
    for i, a in enumerate(asked):
        for b in asked[i + 1 :]:
            assert not same(a, b), f"{kata.slug}: {a!r} and {b!r}"


def test_repeats_catches_the_copies_found():
    """int4's opening question and kv_cache's opening prompt are in the bank (for `dojo ask`): both are
    recognised as repeats of their kata, so neither is that kata's bank follow-up"""
    by_topic = {}
    for entry in bank.bank():
        by_topic.setdefault(entry.topic, []).append(entry.question)
    colleague = next(q for q in by_topic["quantization"] if q.question.startswith("A colleague says INT4"))
    design = next(q for q in by_topic["kv-cache"] if q.question.startswith("Design and implement a KV cache"))
    assert bank.repeats(colleague, catalog.get("int4"))
    assert bank.repeats(design, catalog.get("kv_cache"))
    assert bank.repeats(design, catalog.get("generate")) is None


@pytest.mark.parametrize("slug", [k.slug for k in catalog.load()])
def test_ask_takes_every_kata_slug(slug):
    """`dojo ask <slug>` offers the bank questions closest to that kata, for every kata"""
    entries = bank.pick(slug)
    assert entries and entries[0] in bank.bank()


def test_ask_kv_cache_from_the_command_line(tmp_path):
    """`dojo ask kv_cache` is a drill, not an error (it was refused: 'kv_cache' is no topic's substring)"""
    env = {
        **{k: v for k, v in os.environ.items() if k != "DOJO_KATAS_DIR"},
        "DOJO_WORKSPACE": str(tmp_path),
        "NO_COLOR": "1",
    }
    out = subprocess.run(
        [sys.executable, "-m", "dojo", "ask", "kv_cache"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    assert "Bank question (kv-cache)" in out.stdout


POINTS = [(k.slug, p) for k in KATAS for q in k.questions() for p in q.rubric] + [
    ("BANK.md", p) for e in bank.bank() for p in e.question.rubric
]


@pytest.mark.parametrize(("source", "point"), POINTS, ids=[f"{s}: {p[:40]}" for s, p in POINTS])
def test_every_rubric_point_has_evidence_to_find(source, point):
    """every rubric point of every kata's QUESTIONS.md and of BANK.md yields a key term or number for the
    scorecard to look for in an answer, so no self-marked point is unmatchable"""
    found = evidence.terms(point)
    assert found, f"{source}: rubric point {point!r} has no key term or number the scorecard could find"
    assert evidence.found(point, point), f"{source}: rubric point {point!r} does not find its own terms"
