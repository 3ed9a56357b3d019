"""Folding a report's parametrised tests: one block per test function, one line per cause of failure.

`fold(tests)` groups the cases of one test function; a group's failures are clustered by message
*modulo the parameters* (quoted text and numbers masked), so 8 cases failing alike read as one cause.
`set_aside_unwritten(blocks)` takes out the blocks that fail only because a stub's function is not
written yet, for one line naming those functions. Printing is dojo.practice.report's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dojo.grading.result import TestResult

_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\b\d+(?:\.\d+)?(?:e-?\d+)?\b")


@dataclass
class Cause:
    """Failing cases of one test function whose messages agree modulo the parameters."""

    who: str  # "seed=2" | "all 8 cases" | "3 of 8 cases (seed=0, seed=1, seed=4)"
    message: str  # what they have in common, or the first case's message
    outcome: str  # failed | inconclusive


@dataclass
class Block:
    """One test function in the report: its cases folded."""

    tests: list[TestResult]
    causes: list[Cause] = field(default_factory=list)

    @property
    def first(self) -> TestResult:
        return self.tests[0]

    @property
    def outcome(self) -> str:
        """The worst outcome among the cases: failed, then inconclusive, skipped, passed."""
        for worst in ("failed", "inconclusive", "skipped"):
            if any(t.outcome == worst for t in self.tests):
                return worst
        return "passed"

    @property
    def earned(self) -> int:
        return sum(t.points for t in self.tests if t.outcome == "passed")

    @property
    def points(self) -> int:
        return sum(t.points for t in self.tests)

    @property
    def label(self) -> str:
        """What the block covers beside its property: one case's label, or how many cases."""
        if len(self.tests) == 1:
            return self.first.case
        failing = sum(t.outcome == "failed" for t in self.tests)
        return f"{len(self.tests)} cases" + (f", {failing} failing" if 0 < failing < len(self.tests) else "")


def fold(tests: list[TestResult]) -> list[Block]:
    """The tests as blocks, in order: the cases of one parametrised test function together."""
    blocks: list[Block] = []
    for test in tests:
        if blocks and _function(blocks[-1].first) == _function(test) and "[" in test.name:
            blocks[-1].tests.append(test)
        else:
            blocks.append(Block([test]))
    for block in blocks:
        block.causes = _causes(block.tests)
    return blocks


@dataclass
class Unwritten:
    """The blocks whose every failure is a stub's NotImplementedError, and the functions they wait on."""

    blocks: list[Block] = field(default_factory=list)
    functions: dict[str, str] = field(default_factory=dict)  # in report order -> where: "bpe.py:41" or ""

    @property
    def waiting(self) -> int:
        """The failing tests (cases) that wait on the functions."""
        return sum(t.outcome == "failed" for block in self.blocks for t in block.tests)

    @property
    def points(self) -> int:
        return sum(block.points for block in self.blocks)


def set_aside_unwritten(blocks: list[Block]) -> tuple[list[Block], Unwritten]:
    """(the blocks a report shows, the ones set aside): a block is set aside when it fails, no case passed
    or was inconclusive, and every failing case is a stub's NotImplementedError in a function it names."""
    shown, todo = [], Unwritten()
    for block in blocks:
        failed = [t for t in block.tests if t.outcome == "failed"]
        sites = [unwritten_site(t.message) for t in failed]
        kept = any(t.outcome in ("passed", "inconclusive") for t in block.tests)
        if not failed or kept or any(site is None for site in sites):
            shown.append(block)
            continue
        todo.blocks.append(block)
        for function, where in sites:
            todo.functions[function] = todo.functions.get(function) or where
    return shown, todo


# the two wordings of a stub's error: dojo.grading.suite.failures's when no test caught it,
# "NotImplementedError: not written yet (at bpe.py:41, in BPETokenizer.__init__)", and dojo.testing.raised's
# when a test wanted another error, "...: not written yet (NotImplementedError at bpe.py:78, in X.load), want"
_UNCAUGHT = re.compile(
    r"NotImplementedError: not written yet \((?:at (?P<where>.+), )?in (?P<function>[^\s()]+)\)"
)
_EXPECTED = re.compile(
    r"not written yet \(NotImplementedError(?: at (?P<where>.+?),)? in (?P<function>[^\s()]+)\)"
)
_EXPLAINED = "probably because "  # dojo.grading.suite.causes.PREFIX (importing it would import pytest)
_INPUT_NOTES = ("failing input: ", "fails for any input", "then drew ")  # hypothesis's, in failures' words


def unwritten_site(message: str) -> tuple[str, str] | None:
    """(function, where) when `message` says only that a stub's function is not written yet (a builds_on
    explanation and the failing input aside); None for any other failure, or one that names no function."""
    lines = message.strip().splitlines()
    if lines and lines[0].startswith(_EXPLAINED):
        lines = lines[1:]
    if not lines or not all(line.startswith(_INPUT_NOTES) for line in lines[1:]):
        return None
    found = _UNCAUGHT.fullmatch(lines[0]) or _EXPECTED.search(lines[0])
    return (found["function"], found["where"] or "") if found else None


def _function(test: TestResult) -> str:
    return test.name.split("[", 1)[0]


def _causes(tests: list[TestResult]) -> list[Cause]:
    shown = [t for t in tests if t.outcome in ("failed", "inconclusive") and t.message.strip()]
    clusters: dict[tuple[str, str], list[TestResult]] = {}
    for test in shown:
        clusters.setdefault((test.outcome, _LITERAL.sub("…", test.message.strip())), []).append(test)
    causes = []
    for cases in clusters.values():
        messages = [t.message.strip() for t in cases]
        if len(cases) == 1:
            causes.append(Cause(_case(cases[0], tests), messages[0], cases[0].outcome))
            continue
        who = (
            f"all {len(cases)} cases"
            if len(cases) == len(tests)
            else f"{len(cases)} of {len(tests)} cases ({', '.join(_case(t, tests) for t in cases)})"
        )
        common = _common_tail(messages)
        if len(set(messages)) == 1 or len(common.split()) >= 3:
            causes.append(Cause(who, common, cases[0].outcome))
        else:
            causes.append(Cause(f"{who} alike, e.g. {_case(cases[0], tests)}", messages[0], cases[0].outcome))
    return causes


def _case(test: TestResult, group: list[TestResult]) -> str:
    """A case's readable label; when the row has none (an older results file), its place in the group."""
    return test.case or (f"case {group.index(test) + 1}" if len(group) > 1 else "")


def _common_tail(messages: list[str]) -> str:
    """The end the messages share, from a clause boundary (after ": "): the whole message if all are equal."""
    tail = messages[0]
    for message in messages[1:]:
        n = 0
        while n < min(len(tail), len(message)) and tail[-1 - n] == message[-1 - n]:
            n += 1
        tail = tail[len(tail) - n :]
    if any(tail == m for m in messages):
        return tail
    cut = tail.find(": ")
    return tail[cut + 2 :] if cut >= 0 else ""
